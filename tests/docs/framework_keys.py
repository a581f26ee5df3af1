"""What the RL frameworks' config loaders read, for checking the config snippets of the docs.

The frameworks cannot be installed here, so each check below restates what their loader reads
and requires, from the file and commit named with it (the same snapshots as
tests/clients/client_models.py and docs/protocols.md). Each function takes the parsed snippet
and returns a list of problems (strings); [] means the framework would accept it.
"""
import re
from urllib.parse import urlsplit

PINS = {
    "verl": ("volcengine/verl", "b178a3cd56f58b2d502255daba591e92833930a7"),
    "skyrl": ("NovaSky-AI/SkyRL", "a9564572eb8e91076be43c1bd5e4615e3de17265"),
    "search-r1": ("PeterGriffinJin/Search-R1", "a14dc3a4ffc6fe88c1e95038d9738e21ba3f7a06"),
    "slime": ("THUDM/slime", "624b824a898ab0ec1fcb4d373004c7f3852bf515"),
    "rlinf": ("RLinf/RLinf", "a3816b596478dcd8a5c69a6ec1468c9519f77b5b"),
    "asearcher": ("inclusionAI/ASearcher", "813e804fc3b24b661b4f5625c77343d5daa14a03"),
}

# verl/tools/search_tool.py (SearchTool.__init__): the config keys it reads; others are ignored.
VERL_SEARCH_TOOL_KEYS = {"retrieval_service_url", "num_workers", "rate_limit", "timeout", "topk", "enable_global_rate_limit",
                         "type"}
# verl/tools/mcp_base_tool.py and tool_registry.py initialize_mcp_tool: config keys read for MCP tools.
VERL_MCP_TOOL_KEYS = {"rate_limit", "timeout", "type"}


def _is_str(v):
    return isinstance(v, str) and v != ""


def verl_tool_schema(schema, where):
    """verl/tools/schemas.py OpenAIFunctionToolSchema (pydantic): type, function.name,
    function.description, function.parameters{type, properties{NAME: {type, ...}}, required}."""
    errs = []
    if not isinstance(schema, dict):
        return ["%s: tool_schema must be a mapping" % where]
    if not _is_str(schema.get("type")):
        errs.append("%s: tool_schema.type is required (a string)" % where)
    fn = schema.get("function")
    if not isinstance(fn, dict):
        return errs + ["%s: tool_schema.function is required" % where]
    for k in ("name", "description"):
        if not _is_str(fn.get(k)):
            errs.append("%s: tool_schema.function.%s is required (a string)" % (where, k))
    params = fn.get("parameters")
    if params is not None:
        if not isinstance(params, dict) or not _is_str(params.get("type")) or not isinstance(params.get("properties"), dict) \
                or not isinstance(params.get("required"), list):
            errs.append("%s: tool_schema.function.parameters needs type, properties and required" % where)
        else:
            for name, prop in params["properties"].items():
                if not isinstance(prop, dict) or not _is_str(prop.get("type")):
                    errs.append("%s: tool_schema parameter %s needs a type" % (where, name))
    return errs


def verl_tools(doc, check_url):
    """verl/tools/utils/tool_registry.py initialize_tools_from_config: `tools` is a list; each entry
    has class_name and config.type (ToolType: "native" or "mcp"; required). A native entry's tool
    is built with its tool_schema: verl/tools/base_tool.py BaseTool.__init__ needs one (an entry
    without it fails with "Tool schema is not set" or an AttributeError). An mcp entry needs
    mcp.mcp_servers_config_path and config.rate_limit (read as attributes)."""
    errs = []
    tools = doc.get("tools") if isinstance(doc, dict) else None
    if not isinstance(tools, list) or not tools:
        return ["verl tool config: `tools` must be a non-empty list"]
    for i, t in enumerate(tools):
        w = "tools[%d]" % i
        if not isinstance(t, dict) or not _is_str(t.get("class_name")):
            errs.append("%s: class_name is required" % w)
            continue
        cfg = t.get("config")
        if not isinstance(cfg, dict):
            errs.append("%s: config is required" % w)
            continue
        kind = cfg.get("type")
        if kind not in ("native", "mcp"):
            errs.append("%s: config.type must be \"native\" or \"mcp\" (verl's ToolType; got %r)" % (w, kind))
            continue
        if kind == "native":
            if "tool_schema" not in t or t["tool_schema"] is None:
                errs.append("%s: a native tool needs tool_schema (BaseTool: \"Tool schema is not set\")" % w)
            else:
                errs += verl_tool_schema(t["tool_schema"], w)
            if t["class_name"] == "verl.tools.search_tool.SearchTool":
                unknown = sorted(set(cfg) - VERL_SEARCH_TOOL_KEYS)
                if unknown:
                    errs.append("%s: config keys SearchTool does not read (ignored): %s" % (w, ", ".join(unknown)))
                if not _is_str(cfg.get("retrieval_service_url")):
                    errs.append("%s: config.retrieval_service_url is required" % w)
                else:
                    errs += check_url(cfg["retrieval_service_url"], "verl", "%s.config.retrieval_service_url" % w)
        else:
            mcp = t.get("mcp")
            if not isinstance(mcp, dict) or not _is_str(mcp.get("mcp_servers_config_path")):
                errs.append("%s: mcp.mcp_servers_config_path is required for an mcp tool" % w)
            elif "tool_selected_list" in mcp and not isinstance(mcp["tool_selected_list"], list):
                errs.append("%s: mcp.tool_selected_list must be a list" % w)
            if "rate_limit" not in cfg:
                errs.append("%s: config.rate_limit is required for an mcp tool (ClientManager.initialize)" % w)
            unknown = sorted(set(cfg) - VERL_MCP_TOOL_KEYS)
            if unknown:
                errs.append("%s: config keys the MCP tool does not read (ignored): %s" % (w, ", ".join(unknown)))
    return errs


def verl_mcp_servers(doc, check_url):
    """verl/tools/utils/mcp_clients/McpClientManager.py initialize: {"mcpServers": {NAME: {...}}};
    an entry with auth_token is opened as SSE with a Bearer header (needs url); the others go to
    fastmcp's Client as an MCP config (a remote server needs url)."""
    servers = doc.get("mcpServers") if isinstance(doc, dict) else None
    if not isinstance(servers, dict) or not servers:
        return ["mcp servers file: mcpServers must be a non-empty mapping"]
    errs = []
    for name, s in servers.items():
        if not isinstance(s, dict):
            errs.append("mcpServers.%s must be a mapping" % name)
        elif not _is_str(s.get("url")) and "command" not in s:
            errs.append("mcpServers.%s needs a url" % name)
        elif _is_str(s.get("url")):
            path = urlsplit(s["url"]).path
            want = "/sse" if "auth_token" in s else None
            if want and path != want:
                errs.append("mcpServers.%s: an entry with auth_token is opened with the SSE transport: its url must end "
                            "in /sse, got %s" % (name, s["url"]))
            errs += check_url(s["url"], "mcp", "mcpServers.%s.url" % name)
    return errs


# examples/search-r1/generate_with_search.py: SEARCH_R1_CONFIGS keys read without a default.
SLIME_REQUIRED = ["max_turns", "topk", "search_concurrency", "search_backend", "return_logprob", "format_score"]
SLIME_BACKEND_KEYS = {"local": ["search_url", "proxy"], "google": ["api_key", "snippet_only", "proxy"]}


def slime_configs(doc, check_url):
    errs = ["SEARCH_R1_CONFIGS: %s is required (read without a default)" % k for k in SLIME_REQUIRED if k not in doc]
    return errs + slime_backend(doc, check_url)


def slime_backend(doc, check_url):
    """The part of SEARCH_R1_CONFIGS a table row shows: search_backend and its dict, complete."""
    errs = []
    backend = doc.get("search_backend")
    if backend not in SLIME_BACKEND_KEYS:
        return errs + ["SEARCH_R1_CONFIGS: search_backend must be \"local\" or \"google\", got %r" % backend]
    sub = doc.get(backend)
    if not isinstance(sub, dict):
        return errs + ["SEARCH_R1_CONFIGS[%r] is required" % backend]
    errs += ["SEARCH_R1_CONFIGS[%r][%r] is required (KeyError on the first search)" % (backend, k)
             for k in SLIME_BACKEND_KEYS[backend] if k not in sub]
    if backend == "local" and _is_str(sub.get("search_url")):
        errs += check_url(sub["search_url"], "slime", "SEARCH_R1_CONFIGS['local']['search_url']")
    return errs


def rlinf_config(doc, check_url):
    """rlinf/agents/searchr1/search_tool_worker.py and wideseek_r1/tools.py read
    cfg.tools.search.server_addr and cfg.tools.search.topk (no defaults), tools.online (WideSeek,
    default false) and tools.search.dummy_mode (default false); the URL is http://{server_addr}/retrieve."""
    search = ((doc or {}).get("tools") or {}).get("search") if isinstance(doc, dict) else None
    if not isinstance(search, dict):
        return ["RLinf config: tools.search is required"]
    errs = []
    addr = search.get("server_addr")
    if not _is_str(addr) or "://" in addr or "/" in addr or not re.match(r"^[^:]+:\d+$", addr):
        errs.append("RLinf config: tools.search.server_addr must be host:port without scheme or path, got %r" % addr)
    else:
        errs += check_url("http://%s/retrieve" % addr, "rlinf", "tools.search.server_addr")
    if not isinstance(search.get("topk"), int):
        errs.append("RLinf config: tools.search.topk is required (an integer)")
    online = doc["tools"].get("online", False)
    if online not in (False, True):
        errs.append("RLinf config: tools.online must be a boolean")
    if online:
        errs.append("RLinf config: tools.online true calls serper.dev directly, not the gateway")
    return errs


# search_r1: verl/trainer/config/ppo_trainer.yaml of the Search-R1 repository, section retriever.
SEARCH_R1_OVERRIDES = {"retriever.url", "retriever.topk"}
# SkyRL: skyrl-gym/skyrl_gym/envs/search/env.py SearchEnvConfig.
SKYRL_SEARCH_FIELDS = {"search_url", "topk", "timeout", "log_requests"}


def overrides(command, check_url):
    """Hydra/OmegaConf command-line overrides in a shell command: retriever.* (Search-R1) and
    environment.skyrl_gym.search.* (SkyRL)."""
    errs = []
    for key, value in re.findall(r"(?:^|\s)([\w.]+)=(\"[^\"]*\"|'[^']*'|\S+)", command):
        value = value.strip("\"'")
        if key.startswith("retriever."):
            if key not in SEARCH_R1_OVERRIDES:
                errs.append("Search-R1 override %s: the trainer config has only %s" % (key, ", ".join(sorted(SEARCH_R1_OVERRIDES))))
            elif key == "retriever.url":
                errs += check_url(value, "search-r1", key)
        elif key.startswith("environment.skyrl_gym.search."):
            field = key[len("environment.skyrl_gym.search."):]
            if field not in SKYRL_SEARCH_FIELDS:
                errs.append("SkyRL override %s: SearchEnvConfig has %s" % (key, ", ".join(sorted(SKYRL_SEARCH_FIELDS))))
            elif field == "search_url":
                errs += check_url(value, "skyrl", key)
    return errs


def asearcher_address_file(command):
    """AReaL/ASearcher/utils/search_utils.py get_server_list: $RAG_SERVER_ADDR_DIR/Host*_IP*.txt,
    each line an address host:port (the client adds http:// and the path). Written by hand (echo),
    or by the gateway itself (`searchgate --address-file`, which writes host:port)."""
    m = re.search(r"--address-file[ =]\"?\$RAG_SERVER_ADDR_DIR/([^\"\s]+)\"?", command)
    if m:
        name = m.group(1)
        return [] if re.match(r"^Host.*_IP.*\.txt$", name) else ["ASearcher address file %s: the client globs Host*_IP*.txt" % name]
    m = re.search(r"(?:echo|printf)\s+(?:'%s'\s+)?(\S+)\s*>\s*\"?\$RAG_SERVER_ADDR_DIR/([^\"\s]+)\"?", command)
    if not m:
        return ["ASearcher address file: expected `echo HOST:PORT > \"$RAG_SERVER_ADDR_DIR/Host<ip>_IP<port>.txt\"`"]
    addr, name = m.group(1), m.group(2)
    errs = []
    if not re.match(r"^Host.*_IP.*\.txt$", name):
        errs.append("ASearcher address file %s: the client globs Host*_IP*.txt" % name)
    if not re.match(r"^[^:/]+:\d+$", addr):
        errs.append("ASearcher address file: the line must be host:port, got %s" % addr)
    return errs


def prometheus_rules(doc, documented_metrics):
    errs = []
    groups = doc.get("groups") if isinstance(doc, dict) else None
    if not isinstance(groups, list):
        return ["Prometheus rules: groups must be a list"]
    for g in groups:
        for r in (g or {}).get("rules") or []:
            if not _is_str(r.get("alert") or r.get("record")) or not _is_str(str(r.get("expr", ""))):
                errs.append("Prometheus rule without alert/record or expr: %r" % r)
                continue
            for m in re.findall(r"searchgate_[a-z0-9_]+", str(r["expr"])):
                base = re.sub(r"_(bucket|sum|count)$", "", m)
                if m not in documented_metrics and base not in documented_metrics:
                    errs.append("alert %s uses %s, which docs/operations.md does not document" % (r.get("alert"), m))
    return errs
