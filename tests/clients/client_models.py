"""Behavioural models of the retrieval clients of the RL frameworks searchgate serves.

The frameworks cannot be installed here (they pull in torch, Ray, sglang ...) and their code is not
ours to copy. What the tests need from a client is its behaviour towards the server, and that is
stated here as data, one model per client:

  request    method, how the URL is formed, the body's shape and fields, the headers it sets
  transport  the HTTP library (requests or aiohttp: their behaviour matters, e.g. how a URL with a
             newline or a non-JSON body is handled), session reuse and the timeouts it sets
  failures   which answers it treats as failure (statuses it checks by value, raise_for_status,
             the exceptions it catches) and which of those it tries again
  retry      how many attempts, the seconds it sleeps after each failure, and whether it sleeps
             after the last one too
  give up    what it hands on when it stops: an error text, an empty list, an exception
  view       what it reads from a 200 body and what it makes of it (the text the model sees or
             the structure the next stage reads)

client_engine.py executes a model against a gateway. Every number and string below was read from
the repository, file and function named with it, at the commit in PINS (Apache-2.0 sources, read
and restated, not copied); docs/protocols.md describes the same behaviour in words.
"""
from dataclasses import dataclass, field, replace

# (repository, commit) of every snapshot read; tests/docs/framework_keys.py pins the same ones.
PINS = {
    "verl": ("volcengine/verl", "b178a3cd56f58b2d502255daba591e92833930a7"),
    "skyrl": ("NovaSky-AI/SkyRL", "a9564572eb8e91076be43c1bd5e4615e3de17265"),
    "search-r1": ("PeterGriffinJin/Search-R1", "a14dc3a4ffc6fe88c1e95038d9738e21ba3f7a06"),
    "slime": ("THUDM/slime", "624b824a898ab0ec1fcb4d373004c7f3852bf515"),
    "rlinf": ("RLinf/RLinf", "a3816b596478dcd8a5c69a6ec1468c9519f77b5b"),
    "asearcher": ("inclusionAI/ASearcher", "813e804fc3b24b661b4f5625c77343d5daa14a03"),
}

# ---- what one attempt can come to (the engine classifies; a model says which it retries) ----
STATUS = "status"          # a status the client checks by value before anything else (verl's 5xx list)
HTTP_ERROR = "http-error"  # any other status >= 400, when the client calls raise_for_status
CONNECT = "connect"        # refused, reset, closed before an answer (connect timeouts included)
TIMEOUT = "timeout"        # the client's own timeout while waiting for the answer
DECODE = "decode"          # a 2xx body that is not JSON (aiohttp: or not labelled application/json)
READ = "read"              # the JSON lacks what the client reads (KeyError, IndexError, TypeError)
OTHER = "other"            # anything else the library raises
ANY = frozenset({STATUS, HTTP_ERROR, CONNECT, TIMEOUT, DECODE, READ, OTHER})


@dataclass(frozen=True)
class Endpoint:
    """Where the request goes. `url`: the client is configured with the whole URL. `hostport`:
    with host:port, the client writes http://{addr}{path}. `files`: addresses are lines of the
    files matching `pattern` in the directory named by $`env`, one picked at random per client
    (and again after each failure when `rechoose`)."""
    kind: str
    path: str = ""
    env: str = ""
    pattern: str = ""
    rechoose: bool = False


@dataclass(frozen=True)
class Transport:
    """library: "requests" or "aiohttp". session: "new" (a fresh session, so a fresh connection, per
    attempt) or "shared" (one for the client's life). timeout: requests: seconds for connect and for
    each read, None for none; aiohttp: ClientTimeout fields, set per request (`timeout_at`
    "request") or on the shared session ("session"). pool: requests adapter or aiohttp connector
    sizes (total, per host). trust_env: aiohttp reads proxy variables."""
    library: str
    session: str = "new"
    timeout: object = None
    timeout_at: str = "request"
    pool: tuple = ()
    trust_env: bool = False


@dataclass(frozen=True)
class Retry:
    """At most `attempts` requests; after failure k (1-based) the client sleeps
    first + step * (k - 1) seconds, except after the last attempt unless `after_last`."""
    attempts: int = 1
    first: float = 0.0
    step: float = 0.0
    after_last: bool = False

    def delay(self, failure):
        return self.first + self.step * (failure - 1)


@dataclass(frozen=True)
class GiveUp:
    """What the client hands on when it stops without an answer. kind "text": `text` with {error}
    (the last failure's message, from the model's `messages`) and {request_id}; "value": `value`;
    "raise": RuntimeError(`text`) chained to the last failure; "propagate": the last failure's
    exception itself (the client has no handler)."""
    kind: str
    text: str = ""
    value: object = None


@dataclass(frozen=True)
class PassagesText:
    """A tool that renders each query's documents as text. `doc` is filled per document with n
    (1-based), contents (the item's value at `contents_at`, stripped when `strip_contents`), and
    title/text (contents split at its first newline); a query's documents are concatenated
    (stripped when `strip_block`); queries are joined with `join` (None: a list of per-query
    strings) and the whole wrapped as {"result": TEXT} in JSON when `wrap_json` ("unicode": as is,
    "ascii": non-ASCII escaped). `result_required`: the body's "result" is indexed
    (a KeyError when missing) rather than defaulted to []. The texts for no results, a falsy body
    and a body the tool fails to read ({error}) are the tool's own; None: that case raises."""
    doc: str
    contents_at: tuple = ("document", "contents")
    strip_contents: bool = False
    strip_block: bool = False
    join: object = None
    wrap_json: object = None
    result_required: bool = True
    no_results: object = None
    falsy_body: object = None
    read_error: object = None


@dataclass(frozen=True)
class FirstQueryDocs:
    """slime: the first query's list (default [[]] when "result" is missing), each dict item's flat
    "contents" (default "") re-wrapped as {"document": {"contents": ...}}, `placeholder` for an
    item with empty contents; items that are not objects are skipped."""
    placeholder: str


@dataclass(frozen=True)
class BrowserResults:
    """RLinf/ASearcher: per query {"documents": [contents...], "urls": [url...], "server_type"},
    each item's flat "contents" and "url" indexed (a KeyError when missing)."""
    server_type: str


@dataclass(frozen=True)
class Pages:
    """POST /access: per URL {"page": contents, or "" for a null page, "type": "access",
    "server_type"}. `shown`: (limit, empty text) when the tool shows the first page to the model
    as page[:limit], or the empty text when it is blank; None: the client's list is the answer."""
    server_type: str
    shown: object = None


@dataclass(frozen=True)
class Call:
    """One operation of a client: the request, its transport, its failure handling and what it
    reads. body: "queries" (the list), "query" (one string) or "urls"; fields follow it in the
    client's order. `retry_statuses` are checked by value first; `raise_for_status` turns any
    other status >= 400 into a failure (without either the status is not looked at and the body
    is read whatever it is). `retry_on`: the failure kinds tried again (others stop at once).
    `read_in_retry`: the body is read inside the retried block (a read failure is a failure like
    any other) rather than after it (`view`'s own handling applies). `messages`: the error text of
    each failure kind, with {status}, {attempt}, {attempts} and {exc}."""
    endpoint: Endpoint
    transport: Transport
    body: str
    fields: tuple = ()
    headers: tuple = ()
    retry_statuses: frozenset = frozenset()
    raise_for_status: bool = True
    retry_on: frozenset = frozenset()
    retry: Retry = Retry()
    give_up: GiveUp = GiveUp("propagate")
    read_in_retry: bool = False
    view: object = None
    messages: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Client:
    name: str
    framework: str          # key of PINS
    source: str             # file and function the model was read from
    calls: dict             # operation ("search", "access") -> Call


# ---- verl SearchTool ----
# verl/tools/utils/search_r1_like_utils.py, call_search_api: module constants DEFAULT_TIMEOUT 30,
# MAX_RETRIES 10, INITIAL_RETRY_DELAY 1; the delay after failed attempt k is INITIAL_RETRY_DELAY * k,
# skipped after the last (1 + 2 + ... + 9 = 45 s). It checks 500/502/503/504 by value, then
# raise_for_status. Connection errors and timeouts are retried like those statuses; any other
# requests exception, a JSON decode error and anything else end the loop. requests >= 2.27 raises
# its JSONDecodeError, a RequestException, so a non-JSON body takes the "API Request Error" branch.
# The last error loses its "[Search Request ID: ...] " prefix for "API Call Failed: ".
# perform_single_search_batch: "Search error: " + that, or the passages as _passages2string renders
# them, in json.dumps({"result": ...}, ensure_ascii=False); SearchTool.__init__: timeout 30, topk 3 by default.
_VERL_MESSAGES = {
    STATUS: "API Request Error: Server Error ({status}) on attempt {attempt}/{attempts}",
    CONNECT: "Connection Error: {exc}",
    TIMEOUT: "Timeout Error: {exc}",
    HTTP_ERROR: "API Request Error: {exc}",
    DECODE: "API Request Error: {exc}",
    OTHER: "Unexpected Error: {exc}",
}
_VERL_TOOL_TEXTS = dict(no_results="No search results found.",
                        falsy_body="Unknown API state (no response and no error message).",
                        read_error="Error processing search results: {error}")

VERL = Client(
    "verl", "verl", "verl/tools/utils/search_r1_like_utils.py call_search_api, perform_single_search_batch", {
        "search": Call(
            endpoint=Endpoint("url"),
            transport=Transport("requests", session="new", timeout=30),
            body="queries", fields=(("topk", 3), ("return_scores", True)),
            headers=(("Content-Type", "application/json"), ("Accept", "application/json")),
            retry_statuses=frozenset({500, 502, 503, 504}),
            retry_on=frozenset({STATUS, CONNECT, TIMEOUT}),
            retry=Retry(attempts=10, first=1, step=1),
            give_up=GiveUp("text", "Search error: API Call Failed: {error}"),
            view=PassagesText("Doc {n} (Title: {title})\n{text}\n\n", strip_block=True, join="\n---\n", wrap_json="unicode",
                              result_required=False, **_VERL_TOOL_TEXTS),
            messages=_VERL_MESSAGES)})

# ---- SkyRL ----
# skyrl-gym/skyrl_gym/tools/search.py, call_search_api: the same constants and loop as verl, one
# query as {"query": q}, over the shared requests.Session of SearchToolGroup._get_shared_session
# (HTTPAdapter pool_connections 256, pool_maxsize 256, max_retries 0). Its error is returned with
# the "[Search Request ID: <uuid4>] " prefix kept. SearchToolGroup.search: "Search error: " + that,
# documents as "Doc {n}: {contents stripped}\n", the same texts for no results and a bad body, in
# json.dumps with its default ASCII escapes. skyrl_gym/envs/search/env.py SearchEnvConfig: topk 3, timeout 30.
SKYRL = Client(
    "skyrl", "skyrl", "skyrl-gym/skyrl_gym/tools/search.py call_search_api, SearchToolGroup.search", {
        "search": replace(
            VERL.calls["search"],
            transport=Transport("requests", session="shared", timeout=30, pool=(256, 256)),
            body="query",
            give_up=GiveUp("text", "Search error: [Search Request ID: {request_id}] {error}"),
            view=PassagesText("Doc {n}: {contents}\n", strip_contents=True, join="\n---\n", wrap_json="ascii",
                              result_required=False, **_VERL_TOOL_TEXTS))})

# ---- Search-R1 training loop ----
# search_r1/llm_agent/generation.py, LLMGenerationManager._batch_search: requests.post(url,
# json=payload) with no timeout and no handler, .json()["result"]; batch_search renders each query
# with _passages2string as "Doc {n}(Title: {title}) {text}\n". topk: retriever.topk, 3 in
# verl/trainer/config/ppo_trainer.yaml and train_grpo.sh. Any failure leaves the training step.
SEARCH_R1 = Client(
    "search-r1", "search-r1", "search_r1/llm_agent/generation.py batch_search, _batch_search", {
        "search": Call(
            endpoint=Endpoint("url"),
            transport=Transport("requests", session="new", timeout=None),
            body="queries", fields=(("topk", 3), ("return_scores", True)),
            raise_for_status=False,
            give_up=GiveUp("propagate"),
            view=PassagesText("Doc {n}(Title: {title}) {text}\n"))})

# ---- slime ----
# examples/search-r1/local_search_server.py, local_search: {"queries": [q], "topk": top_k,
# "return_scores": False}, a new aiohttp.ClientSession per call, ClientTimeout(total=60) on the
# request, raise_for_status, resp.json(); any exception inside is printed and [] returned; the body
# is read after that handler. examples/search-r1/generate_with_search.py, search: top_k is
# SEARCH_R1_CONFIGS["topk"] (3); local["proxy"] is read with no default.
SLIME = Client(
    "slime", "slime", "examples/search-r1/local_search_server.py local_search; generate_with_search.py search", {
        "search": Call(
            endpoint=Endpoint("url"),
            transport=Transport("aiohttp", session="new", timeout={"total": 60}),
            body="queries", fields=(("topk", 3), ("return_scores", False)),
            give_up=GiveUp("value", value=[]),
            view=FirstQueryDocs('"No title."\nNo snippet available.'))})

# ---- RLinf, Search-R1 recipe ----
# rlinf/agents/searchr1/search_tool_worker.py, AsyncSearchClient.query_async: http://{server_addr}
# /retrieve, a new aiohttp.ClientSession per attempt, ClientTimeout(total=120, sock_connect=120),
# raise_for_status, reads contents and url inside the try; any exception: asyncio.sleep(10), at
# most 10 attempts (the sleep follows the last one too), then RuntimeError. SearchToolWorker:
# {"queries": [keyword], "topk": tools.search.topk, "return_scores": False}; topk 3 in
# examples/agent/searchr1/config/train_qwen2.5.yaml.
_BROWSER = "async-search-browser"
_TEN_BY_TEN = Retry(attempts=10, first=10, after_last=True)
RLINF_SEARCHR1 = Client(
    "rlinf-searchr1", "rlinf", "rlinf/agents/searchr1/search_tool_worker.py AsyncSearchClient.query_async", {
        "search": Call(
            endpoint=Endpoint("hostport", path="/retrieve"),
            transport=Transport("aiohttp", session="new", timeout={"total": 120, "sock_connect": 120}),
            body="queries", fields=(("topk", 3), ("return_scores", False)),
            retry_on=ANY, retry=_TEN_BY_TEN, read_in_retry=True,
            give_up=GiveUp("raise", "Fail to post search query to RAG server"),
            view=BrowserResults(_BROWSER))})

# ---- RLinf WideSeek-R1, local ----
# rlinf/agents/wideseek_r1/tools.py, AsyncSearchClient: one aiohttp session for the client's life
# (TCPConnector limit 2000, limit_per_host 1000; ClientTimeout(total=300, sock_connect=100) on the
# session; trust_env False); query_async and access_async post without a per-request timeout and
# have the recipe's loop (10 attempts, 10 s after each failure, then RuntimeError).
# WideSeekR1ToolWorker: the first page shown as page[:access_token] when not blank, else "No More
# Information is Found for this URL."; rlinf/agents/tool_call/parsers.py sets access_token 25000.
_WIDESEEK_TRANSPORT = Transport("aiohttp", session="shared", timeout={"total": 300, "sock_connect": 100},
                                timeout_at="session", pool=(2000, 1000), trust_env=False)
RLINF_WIDESEEK = Client(
    "rlinf-wideseek", "rlinf", "rlinf/agents/wideseek_r1/tools.py AsyncSearchClient, WideSeekR1ToolWorker", {
        "search": replace(RLINF_SEARCHR1.calls["search"], transport=_WIDESEEK_TRANSPORT),
        "access": replace(RLINF_SEARCHR1.calls["search"], transport=_WIDESEEK_TRANSPORT,
                          endpoint=Endpoint("hostport", path="/access"), body="urls", fields=(),
                          give_up=GiveUp("raise", "Fail to post access request to RAG server"),
                          view=Pages(_BROWSER, shown=(25000, "No More Information is Found for this URL.")))})

# ---- ASearcher (training) ----
# AReaL/ASearcher/utils/search_utils.py, AsyncSearchBrowserClient: get_server_list globs
# $RAG_SERVER_ADDR_DIR/Host*_IP*.txt and keeps every line of every file (readlines: the newline
# stays); __init__ picks one at random, and so does every failure before its sleep. query_async and
# access_async: RLinf's recipe loop (a new session per attempt, total=120, sock_connect=120,
# 10 x 10 s, RuntimeError). AReaL/ASearcher/utils/search_tool.py SearchToolBox.step sends
# {"queries": [q], "topk": topk, "return_scores": False}; topk 5 in configs/asearcher_local.yaml.
_ADDRESS_FILES = dict(env="RAG_SERVER_ADDR_DIR", pattern="Host*_IP*.txt", rechoose=True)
ASEARCHER = Client(
    "asearcher", "asearcher", "AReaL/ASearcher/utils/search_utils.py AsyncSearchBrowserClient", {
        "search": replace(RLINF_SEARCHR1.calls["search"], endpoint=Endpoint("files", path="/retrieve", **_ADDRESS_FILES),
                          fields=(("topk", 5), ("return_scores", False))),
        "access": replace(RLINF_WIDESEEK.calls["access"], transport=RLINF_SEARCHR1.calls["search"].transport,
                          endpoint=Endpoint("files", path="/access", **_ADDRESS_FILES), view=Pages(_BROWSER))})

CLIENTS = {c.name: c for c in (VERL, SKYRL, SEARCH_R1, SLIME, RLINF_SEARCHR1, RLINF_WIDESEEK, ASEARCHER)}
