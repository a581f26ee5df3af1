"""Checks every snippet a user may copy from README.md and docs/**/*.md.

Each fenced code block is extracted and checked by what it is:

  json / jsonc   must parse (jsonc: // comments allowed). A gateway config ("backends" at the top)
                 runs through `searchgate --check` as written, with small stand-ins created at the
                 paths it names (e5 model, FAISS index, corpus, pages, BM25 index, reranker) and its
                 *_env variables set; a single route entry ({"name", "plugin"|"fusion"}) the same way
                 inside a config of its own; {"mcpServers": ...} against verl's MCP client manager.
  yaml           must parse; verl tool configs (`tools:` list), RLinf configs (`tools.search`) and
                 Prometheus rules (`groups:`) are checked against what their loaders read
                 (framework_keys.py, pinned to the commits read).
  python         must compile; slime's SEARCH_R1_CONFIGS against the keys slime reads.
  sh / bash      each `curl` command runs against a test gateway (localhost:8000 rewritten to it) and
                 must get a 2xx; trainer overrides (retriever.*, environment.skyrl_gym.search.*)
                 and ASearcher address files are checked.

Inline code in table rows is checked too (README's client table, clients.md's CI table): a cell
that is a framework setting -- a trainer override, an ASearcher address file, slime's
SEARCH_R1_CONFIGS (a shown backend dict must be complete, unless the row says "change only"), verl's
`retrieval_service_url: URL`, RLinf's `server_addr: HOST:PORT`, SkyRL's `search_url: URL`, a bare
gateway URL -- gets the same checks as the snippet it abbreviates.

URLs that point at the gateway (127.0.0.1:8000, localhost:8000) in framework configs are sent the
client's own request on the test gateway, whose only route is the default one: a URL naming a route
(/retrieve/<name>) must be defined in the same section of the page, by a gateway config snippet or
a configs/*.json file the section names, or it is flagged.

A snippet that is deliberately partial (a fragment, an abridged answer) says so in the text and is
marked, on the line before its fence, with `<!-- snippet NAME: partial (why) -->`; it is skipped by
that name. `<!-- snippet NAME: KIND -->` names a snippet's kind when the guess is wrong (KIND: data,
gateway-config, route-entry, shell). Prose is checked too: every *.md file a page names exists, and
every #anchor of a link to a page exists in it; a section sign, a numbered docs/protocols.md
citation ("protocols.md 6.2": it has headings, no numbers) and the house notes platform.md and
style.md (not in the repository) are flagged in the docs and in the comments of every tracked
source file.

Usage: check_snippets.py [--root DIR] [--build DIR] [-v]; exit status 1 when anything fails.
"""
import argparse
import ast
import bisect
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

import framework_keys as fk

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import sgtest  # noqa: E402

MARKER = re.compile(r"^\s*<!--\s*snippet\s+([\w.-]+)\s*:\s*([\w-]+)\s*(?:\((.*)\))?\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")
GATEWAY_HOSTS = ("127.0.0.1:8000", "localhost:8000")
TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")
TABLE_RULE = re.compile(r"^\s*\|[\s|:-]*\|\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
HEADING = re.compile(r"^#{1,6}\s")


class Snippet:
    def __init__(self, path, line, lang, body, name=None, kind=None, reason=None):
        self.path, self.line, self.lang, self.body = path, line, lang, body
        self.name, self.kind, self.reason = name, kind, reason

    @property
    def where(self):
        return "%s:%d%s" % (self.path, self.line, " (%s)" % self.name if self.name else "")


def doc_files(root):
    out = [os.path.join(root, "README.md")] if os.path.exists(os.path.join(root, "README.md")) else []
    for d, _, files in os.walk(os.path.join(root, "docs")):
        out += [os.path.join(d, f) for f in files if f.endswith(".md")]
    return sorted(out)


def extract(path, root):
    """Fenced blocks of a markdown file, with the marker comment before each (if any), and the prose."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    rel = os.path.relpath(path, root)
    snippets, prose, i = [], [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            prose.append((i + 1, lines[i]))
            i += 1
            continue
        fence, lang = m.group(2), m.group(3).lower()
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        name = kind = reason = None
        k = i - 1
        while k >= 0 and lines[k].strip() == "":
            k -= 1
        mm = MARKER.match(lines[k]) if k >= 0 else None
        if mm:
            name, kind, reason = mm.group(1), mm.group(2), mm.group(3)
        indent = len(m.group(1))
        body = "\n".join(l[indent:] if l[:indent].strip() == "" else l for l in lines[i + 1:j])
        snippets.append(Snippet(rel, i + 1, lang, body, name, kind, reason))
        i = j + 1
    return snippets, prose


def strip_jsonc(text):
    """Removes // comments outside strings."""
    out, i, in_str = [], 0, False
    while i < len(text):
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\" and i + 1 < len(text):
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            out.append(c)
        elif text.startswith("//", i):
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def shell_commands(body):
    """Commands of a shell block: continuation lines joined, comments and output lines dropped."""
    cmds, cur = [], ""
    for line in body.split("\n"):
        s = line.rstrip()
        if not cur and (s.lstrip().startswith("#") or not s.strip()):
            continue
        cur += (" " if cur else "") + s.strip().rstrip("\\").rstrip()
        if not s.endswith("\\"):
            cmds.append(cur)
            cur = ""
    if cur:
        cmds.append(cur)
    return [re.sub(r"\s+#\s.*$", "", c) if not c.startswith("curl") else c for c in cmds]


class Checker:
    def __init__(self, root, build, verbose=False):
        self.root, self.build, self.verbose = root, build, verbose
        self.failures, self.checked, self.skipped = [], [], []
        self.tmp = tempfile.mkdtemp(prefix="sgdocs-")
        self.gateway = None
        self.fixtures = None
        self.routes = set()  # routes the section being checked defines (configs it names, its config snippets)
        with open(os.path.join(root, "docs", "operations.md"), encoding="utf-8") if os.path.exists(
                os.path.join(root, "docs", "operations.md")) else open(os.devnull) as f:
            self.documented_metrics = set(re.findall(r"searchgate_[a-z0-9_]+", f.read()))

    def close(self):
        if self.gateway is not None:
            self.gateway.stop(check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def fail(self, sn, msg):
        self.failures.append("%s: %s" % (sn.where, msg))

    # ---- the test gateway (curl examples, framework URLs) ----

    def gw(self):
        if self.gateway is None:
            pages = [{"url": "https://en.wikipedia.org/wiki/Hamlet", "contents": "\"Hamlet\"\nHamlet page"}]
            self.gateway = sgtest.Gateway({"backends": [sgtest.example_backend(pages=pages)]})
        return self.gateway

    def check_url(self, url, client, where):
        """Sends `client`'s request to a gateway URL of a framework config (others are not ours)."""
        u = re.sub(r"^(\w+://)?(localhost|127\.0\.0\.1):8000", "", url)
        if u == url:
            return []
        path = u.split("?")[0] or "/"
        m = re.match(r"^/retrieve/([^/]+)$", path)
        if m and m.group(1) in self.routes:
            path = "/retrieve"  # a route the section's config defines: the request itself is checked on the default one
        if client == "mcp":
            return [] if path in ("/mcp", "/sse") else ["%s: %s is not an MCP endpoint of the gateway (/mcp, /sse)" % (where, url)]
        body = {"query": "what is a volcano", "topk": 3, "return_scores": True} if client == "skyrl" else \
            {"queries": ["what is a volcano"], "topk": 3, "return_scores": client in ("verl", "search-r1")}
        r = self.gw().post(path, body)
        if r.status != 200:
            return ["%s: %s answers %d on a gateway with only the default route (%s): name a route a config on this "
                    "section defines (a config snippet, or a configs/*.json file it names), or use /retrieve" % (where, url, r.status, r.body[:120].decode("utf-8", "replace"))]
        return []

    # ---- gateway configs ----

    def make_fixtures(self):
        if self.fixtures is not None:
            return self.fixtures
        d = os.path.join(self.tmp, "fixtures")
        os.makedirs(d)
        corpus = os.path.join(d, "corpus.jsonl")
        with open(corpus, "w") as f:
            for i, (t, x) in enumerate([("Hamlet", "a tragedy by Shakespeare"), ("Paris", "the capital of France"),
                                        ("Volcano", "a rupture in the crust of a planet"), ("Tokyo", "the capital of Japan")]):
                f.write(json.dumps({"id": str(i), "contents": "\"%s\"\n%s" % (t, x), "url": "https://x.example/%d" % i}) + "\n")
        model = os.path.join(sgtest.FIXTURES, "e5-tiny")
        index = os.path.join(d, "flat.index")
        bm25 = os.path.join(d, "bm25")
        for cmd in ([sgtest.binary("searchgate-index-dense"), "--model", model, corpus, index],
                    [sgtest.binary("searchgate-index-bm25"), corpus, bm25]):
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=sgtest.scaled(120))
            if p.returncode != 0:
                raise RuntimeError("building a stand-in failed: %s\n%s" % (cmd, p.stderr))
        self.fixtures = {"model": model, "index": index, "corpus": corpus, "pages": corpus, "bm25": bm25,
                         "xenc": os.path.join(sgtest.FIXTURES, "xenc-tiny")}
        return self.fixtures

    def provide(self, conf_dir, value, kind, problems):
        """Creates the stand-in of `kind` at the path `value` names (relative to the config)."""
        if not isinstance(value, str):
            return
        if os.path.isabs(value):
            problems.append("absolute path %s: the check provides stand-ins only at paths relative to the config" % value)
            return
        target = os.path.normpath(os.path.join(conf_dir, value))
        if not target.startswith(self.tmp):
            problems.append("path %s leaves the check's directory" % value)
            return
        if os.path.lexists(target):
            return
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if kind == "dir":
            os.makedirs(target)
        else:
            os.symlink(self.make_fixtures()[kind], target)

    def stand_ins(self, cfg, conf_dir, problems):
        for b in cfg.get("backends") or []:
            if not isinstance(b, dict):
                continue
            c = b.get("config") if isinstance(b.get("config"), dict) else {}
            plugin = b.get("plugin")
            if plugin == "local":
                for key, kind in (("model", "model"), ("index", "index"), ("corpus", "corpus"), ("pages", "pages"),
                                  ("rerank_index", "index"), ("cache_dir", "dir")):
                    if key in c:
                        self.provide(conf_dir, c[key], kind, problems)
            elif plugin == "qdrant" and "model" in c:
                self.provide(conf_dir, c["model"], "model", problems)
            elif plugin == "bm25" and "index" in c:
                self.provide(conf_dir, c["index"], "bm25", problems)
            if isinstance(b.get("rerank"), dict) and "model" in b["rerank"]:
                self.provide(conf_dir, b["rerank"]["model"], "xenc", problems)
        self.trace_dirs(cfg, conf_dir, problems)

    def trace_dirs(self, cfg, conf_dir, problems):
        """A query trace (docs/traces.md) writes into a directory that must exist: the one its
        path names ("dir/") or the one its file lies in."""
        clients = cfg.get("clients") if isinstance(cfg.get("clients"), dict) else {}
        owners = list(cfg.get("backends") or []) + [clients.get("default")] + list(clients.get("keys") or [])
        for o in owners:
            t = o.get("trace") if isinstance(o, dict) else None
            path = t.get("path") if isinstance(t, dict) else None
            if isinstance(path, str):
                self.provide(conf_dir, path if path.endswith("/") else os.path.dirname(path) or ".", "dir", problems)

    def env_for(self, cfg):
        env, n = {}, [0]

        def walk(o):
            if isinstance(o, dict):
                for k, v in o.items():
                    if k.endswith("_env") and isinstance(v, str):
                        n[0] += 1
                        env[v] = "docs-check-secret-%d" % n[0]
                    walk(v)
            elif isinstance(o, list):
                for v in o:
                    walk(v)
        walk(cfg)
        return env

    def check_gateway_config(self, sn, cfg):
        conf_dir = tempfile.mkdtemp(prefix="conf-", dir=self.tmp)
        conf_dir = os.path.join(conf_dir, "configs")
        os.makedirs(conf_dir)
        problems = []
        self.stand_ins(cfg, conf_dir, problems)
        if problems:
            return self.fail(sn, "; ".join(problems))
        path = os.path.join(conf_dir, "snippet.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        p = subprocess.run([sgtest.binary("searchgate"), "--check", "--port", "0", "--config", path], capture_output=True,
                           text=True, timeout=sgtest.scaled(120), env=dict(os.environ, **self.env_for(cfg)))
        if p.returncode != 0:
            self.fail(sn, "searchgate --check refuses it: %s" % (p.stderr.strip() or p.stdout.strip())[-600:])
        return None

    def route_entry_config(self, entry):
        """A config of its own for a single route entry: stub routes for the routes it names."""
        names = set()
        if isinstance(entry.get("fallback"), str):
            names.add(entry["fallback"])
        if isinstance(entry.get("fusion"), dict):
            names.update(r for r in entry["fusion"].get("routes") or [] if isinstance(r, str))
        names.discard(entry.get("name"))
        return {"backends": [entry] + [sgtest.example_backend(n) for n in sorted(names)]}

    # ---- per language ----

    def check_json(self, sn):
        text = strip_jsonc(sn.body) if sn.lang == "jsonc" else sn.body
        try:
            doc = json.loads(text)
        except ValueError as e:
            return self.fail(sn, "not valid JSON (%s); a deliberate fragment says so and is marked "
                                 "`<!-- snippet NAME: partial (why) -->`" % e)
        kind = sn.kind or ("gateway-config" if isinstance(doc, dict) and "backends" in doc else
                           "route-entry" if isinstance(doc, dict) and "name" in doc and ("plugin" in doc or "fusion" in doc) else
                           "verl-mcp-servers" if isinstance(doc, dict) and "mcpServers" in doc else "data")
        if kind == "gateway-config":
            self.check_gateway_config(sn, doc)
        elif kind == "route-entry":
            self.check_gateway_config(sn, self.route_entry_config(doc))
        elif kind == "verl-mcp-servers":
            for e in fk.verl_mcp_servers(doc, self.check_url):
                self.fail(sn, e)
        return kind

    def check_yaml(self, sn):
        import yaml
        try:
            doc = yaml.safe_load(sn.body)
        except yaml.YAMLError as e:
            return self.fail(sn, "not valid YAML: %s" % e)
        tools = doc.get("tools") if isinstance(doc, dict) else None
        if isinstance(tools, list):
            errs, kind = fk.verl_tools(doc, self.check_url), "verl-tools"
        elif isinstance(tools, dict):
            errs, kind = fk.rlinf_config(doc, self.check_url), "rlinf-config"
        elif isinstance(doc, dict) and "groups" in doc:
            errs, kind = fk.prometheus_rules(doc, self.documented_metrics), "prometheus-rules"
        else:
            errs, kind = [], "data"
        for e in errs:
            self.fail(sn, e)
        return kind

    def check_python(self, sn):
        try:
            tree = ast.parse(sn.body)
        except SyntaxError as e:
            return self.fail(sn, "not valid Python: %s" % e)
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "SEARCH_R1_CONFIGS" for t in node.targets):
                try:
                    doc = ast.literal_eval(node.value)
                except ValueError as e:
                    return self.fail(sn, "SEARCH_R1_CONFIGS is not a literal dict: %s" % e)
                for e in fk.slime_configs(doc, self.check_url):
                    self.fail(sn, e)
                return "slime-config"
        return "python"

    def run_curl(self, sn, cmd):
        gw = self.gw()
        local = cmd
        for h in GATEWAY_HOSTS:
            local = local.replace("http://" + h, "http://127.0.0.1:%d" % gw.port).replace(h, "127.0.0.1:%d" % gw.port)
        if local == cmd:
            return  # not the gateway
        try:
            argv = shlex.split(local)
        except ValueError as e:
            return self.fail(sn, "cannot parse the command: %s" % e)
        argv = argv[:1] + ["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", str(int(sgtest.scaled(20)))] + \
            [a for a in argv[1:] if a not in ("-s", "-si", "-is", "-i", "-v")]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=sgtest.scaled(30))
        code = p.stdout.strip()[-3:]
        if p.returncode != 0 or not code.startswith("2"):
            self.fail(sn, "`%s` gets HTTP %s%s" % (cmd[:100], code or "nothing", (": " + p.stderr.strip()) if p.stderr.strip() else ""))

    def check_shell(self, sn):
        kinds = set()
        for cmd in shell_commands(sn.body):
            if cmd.startswith("curl "):
                kinds.add("curl")
                self.run_curl(sn, cmd)
            if re.search(r"(?:^|\s)(retriever\.|environment\.skyrl_gym\.search\.)[\w.]+=", cmd):
                kinds.add("overrides")
                for e in fk.overrides(cmd, self.check_url):
                    self.fail(sn, e)
            if "$RAG_SERVER_ADDR_DIR/" in cmd:  # a file in it (not `mkdir -p "$RAG_SERVER_ADDR_DIR"`)
                kinds.add("asearcher-address")
                for e in fk.asearcher_address_file(cmd):
                    self.fail(sn, e)
        return "shell:" + ",".join(sorted(kinds)) if kinds else "shell"

    def check_snippet(self, sn):
        if sn.kind == "partial":
            if not sn.reason:
                self.fail(sn, "a partial snippet says why: <!-- snippet NAME: partial (why) -->")
            self.skipped.append(sn.where)
            return
        if sn.lang in ("json", "jsonc"):
            kind = self.check_json(sn)
        elif sn.lang in ("yaml", "yml"):
            kind = self.check_yaml(sn)
        elif sn.lang in ("python", "py"):
            kind = self.check_python(sn)
        elif sn.lang in ("sh", "bash", "shell", "console") or sn.kind == "shell":
            kind = self.check_shell(sn)
        else:
            kind = None
        if kind:
            self.checked.append((sn.where, kind))

    # ---- inline code in table rows ----

    def check_cell(self, code, row):
        """(kind, problems) of one inline code span of a table row; kind None: not a framework setting."""
        if re.search(r"(?:^|\s)(retriever\.|environment\.skyrl_gym\.search\.)[\w.]+=", code):
            return "overrides", fk.overrides(code, self.check_url)
        if "$RAG_SERVER_ADDR_DIR/" in code and re.match(r"^(echo|printf)\s|.*--address-file", code):
            return "asearcher-address", fk.asearcher_address_file(code)
        m = re.match(r"""^SEARCH_R1_CONFIGS((?:\[["'][\w-]+["']\])+)\s*=\s*(.+)$""", code)
        if m:
            keys = re.findall(r"""["']([\w-]+)["']""", m.group(1))
            try:
                value = ast.literal_eval(m.group(2))
            except (ValueError, SyntaxError) as e:
                return "slime-config", ["not a Python literal: %s" % e]
            if keys == ["local", "search_url"] and isinstance(value, str):
                return "slime-config", self.check_url(value, "slime", "SEARCH_R1_CONFIGS['local']['search_url']")
            return "slime-config", []
        if re.match(r"""^["'](search_backend|local|google)["']\s*:""", code):
            try:
                doc = ast.literal_eval("{" + code + "}")
            except (ValueError, SyntaxError) as e:
                return "slime-config", ["not a Python dict literal: %s" % e]
            doc.setdefault("search_backend", "local" if "local" in doc else "google")
            errs = fk.slime_backend(doc, self.check_url)
            if "change only" in row.lower():  # the row tells the reader to keep the other keys of slime's file
                errs = [e for e in errs if "is required" not in e]
            return "slime-config", errs
        m = re.match(r"^([\w.]+):\s+(\S+)$", code)
        if m:
            key, value = m.group(1).split(".")[-1], m.group(2)
            if key == "retrieval_service_url":
                return "verl-tools", self.check_url(value, "verl", m.group(1))
            if key == "server_addr":
                return "rlinf-config", fk.rlinf_config({"tools": {"search": {"server_addr": value, "topk": 3}}}, self.check_url)
            if key == "search_url":
                return "skyrl-config", self.check_url(value, "skyrl", m.group(1))
            return None, []
        if re.match(r"^(https?://)?(localhost|127\.0\.0\.1):8000(/\S*)?$", code):
            path = re.sub(r"^(https?://)?[^/]+", "", code) or "/"
            client = "mcp" if path in ("/mcp", "/sse") else "generic"
            return "url", self.check_url(code, client, "the URL")
        return None, []

    def check_table_row(self, rel, n, row):
        for m in CODE_SPAN.finditer(row):
            code = m.group(2).strip()
            kind, errs = self.check_cell(code, row)
            for e in errs:
                self.failures.append("%s:%d: table cell `%s`: %s" % (rel, n, code[:80], e))
            if kind:
                self.checked.append(("%s:%d" % (rel, n), "table:" + kind))

    def section_routes(self, prose, snippets, heads):
        """Route names each section of a page defines: its gateway config snippets and the
        configs/*.json files its prose names."""
        out = {}
        for n, line in prose:
            for name in re.findall(r"(?<![\w/.-])(configs/[\w.-]+\.json)", line):
                try:
                    with open(os.path.join(self.root, name), encoding="utf-8") as f:
                        cfg = json.load(f)
                except (OSError, ValueError):
                    continue
                out.setdefault(section_of(heads, n), set()).update(
                    b.get("name") for b in cfg.get("backends") or [] if isinstance(b, dict))
        for sn in snippets:
            if sn.lang in ("json", "jsonc") and sn.kind != "partial":
                try:
                    cfg = json.loads(strip_jsonc(sn.body) if sn.lang == "jsonc" else sn.body)
                except ValueError:
                    continue
                if isinstance(cfg, dict) and isinstance(cfg.get("backends"), list):
                    out.setdefault(section_of(heads, sn.line), set()).update(
                        b.get("name") for b in cfg["backends"] if isinstance(b, dict))
        return out

    # ---- prose: files and anchors named ----

    def check_prose(self, path, prose):
        rel = os.path.relpath(path, self.root)
        base = os.path.dirname(path)
        text = "\n".join(l for _, l in prose)
        for n, line in prose:
            for target in re.findall(r"\]\(([^)\s]+)\)", line):
                if re.match(r"^\w+://|^mailto:", target):
                    continue
                file_part, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(base, file_part)) if file_part else path
                if not os.path.exists(dest):
                    self.failures.append("%s:%d: link to %s: no such file in the repository" % (rel, n, target))
                elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                    self.failures.append("%s:%d: link to %s: %s has no heading #%s" % (rel, n, target, file_part or rel, anchor))
            for name in re.findall(r"(?<![\w/.#-])((?:[\w.-]+/)*[\w-]+\.md)\b", re.sub(r"\[[^\]]*\]\([^)]*\)|\w+://\S+", "", line)):
                if not any(os.path.exists(os.path.join(d, name)) for d in (base, self.root, os.path.join(self.root, "docs"))):
                    self.failures.append("%s:%d: names %s, which is not in the repository" % (rel, n, name))
            if re.search(r"(?<![\w.])/work/|(?<![\w/])shared/\w+\.md", line):
                self.failures.append("%s:%d: names a path outside the repository" % (rel, n))
            for problem in stale_references(line):
                self.failures.append("%s:%d: %s" % (rel, n, problem))
        return text

    def check_sources(self):
        """Comments of the code and tests cite docs the same way: no section numbers, no
        notes outside the repository (a checkout only: `git ls-files`)."""
        try:
            files = subprocess.run(["git", "-C", self.root, "ls-files", "*.c", "*.h", "*.cu", "*.cc", "*.py", "*.sh",
                                    "CMakeLists.txt", "*.cmake"], capture_output=True, text=True, timeout=60, check=True).stdout.split()
        except (OSError, subprocess.SubprocessError):
            return
        for rel in files:
            if rel in SELF:
                continue
            try:
                with open(os.path.join(self.root, rel), encoding="utf-8") as f:
                    lines = f.read().split("\n")
            except (OSError, UnicodeDecodeError):
                continue
            for n, line in enumerate(lines, 1):
                for problem in stale_references(line, code=True):
                    self.failures.append("%s:%d: %s" % (rel, n, problem))

    def run(self):
        for path in doc_files(self.root):
            snippets, prose = extract(path, self.root)
            self.check_prose(path, prose)
            heads = [n for n, line in prose if HEADING.match(line)]
            routes = self.section_routes(prose, snippets, heads)
            for sn in snippets:
                self.routes = routes.get(section_of(heads, sn.line), set())
                try:
                    self.check_snippet(sn)
                except Exception as e:  # noqa: BLE001 - a checker bug is a failure too, with the snippet named
                    self.fail(sn, "checker error: %r" % e)
            rel = os.path.relpath(path, self.root)
            for n, line in prose:
                if TABLE_ROW.match(line) and not TABLE_RULE.match(line):
                    self.routes = routes.get(section_of(heads, n), set())
                    try:
                        self.check_table_row(rel, n, line)
                    except Exception as e:  # noqa: BLE001
                        self.failures.append("%s:%d: table row: checker error: %r" % (rel, n, e))
            self.routes = set()
        self.check_sources()
        return not self.failures


STALE_NOTES = re.compile(r"(?<![\w/-])(platform|style)\.md\b")
NUMBERED_CITE = re.compile(r"\bprotocols\.md,?\s+(?:section\s+|§\s*)?(?:\d+(?:\.\d+)*|Appendix\s+\w+)\b")
# The checker's own sources and the self-test name what they look for.
SELF = {"tests/docs/check_snippets.py", "tests/docs/test_docs.py"}


def stale_references(line, code=False):
    """Citations a reader of this repository cannot follow: a section sign or a section number
    (docs/protocols.md has none: cite its heading), and the house notes platform.md and
    style.md, which are not part of the repository. In code, a `§` that is data (an entity
    table) is allowed; a numbered citation and the notes are not."""
    out = []
    if ("§" in line and not code) or re.search(r"§\s*\d", line):
        out.append("a section sign (§): cite a heading instead (a link with its #anchor, or the heading's words)")
    m = NUMBERED_CITE.search(line)
    if m:
        out.append("cites `%s`: docs/protocols.md has no numbered sections; cite a heading" % m.group(0))
    m = STALE_NOTES.search(line)
    if m:
        out.append("cites %s, which is not part of the repository" % m.group(0))
    return out


def section_of(heads, line):
    """The index of the section (0: before the first heading) a line number lies in."""
    return bisect.bisect_right(heads, line)


_anchor_cache = {}


def anchors(path):
    """GitHub's heading anchors of a markdown file."""
    if path not in _anchor_cache:
        out, seen, in_fence = set(), {}, False
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for line in text.split("\n"):
            if FENCE.match(line):
                in_fence = not in_fence
            if in_fence:
                continue
            m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m:
                a = re.sub(r"[^\w\- ]", "", m.group(1).lower().replace("`", "")).replace(" ", "-")
                k = seen.get(a, 0)
                seen[a] = k + 1
                out.add(a if k == 0 else "%s-%d" % (a, k))
        _anchor_cache[path] = out
    return _anchor_cache[path]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=sgtest.SOURCE_DIR)
    ap.add_argument("--build", default=sgtest.BUILD_DIR)
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    os.environ["SG_BUILD_DIR"] = a.build
    sgtest.BUILD_DIR = a.build
    c = Checker(a.root, a.build, a.verbose)
    t0 = time.time()
    try:
        ok = c.run()
    finally:
        c.close()
    if a.verbose:
        for where, kind in c.checked:
            print("checked %-45s %s" % (where, kind))
    for s in c.skipped:
        print("skipped %s" % s)
    for f in c.failures:
        print("FAIL %s" % f)
    print("%d snippets checked, %d skipped as partial, %d problems (%.1f s)" % (len(c.checked), len(c.skipped),
                                                                                  len(c.failures), time.time() - t0))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
