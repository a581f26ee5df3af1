"""Every snippet of README.md and docs/ works as written (check_snippets.py), and the checker
catches broken ones: seeded breaks, in copies of the real pages and in a page of its own, must fail
and a snippet marked partial is skipped by its name. Run: ctest -R docs_snippets."""
import os
import re
import shutil
import subprocess
import tempfile
import unittest

import check_snippets
import sgtest


def run_checker(root):
    c = check_snippets.Checker(root, sgtest.BUILD_DIR)
    try:
        c.run()
    finally:
        c.close()
    return c


class RepositoryDocs(unittest.TestCase):
    def test_every_snippet_works(self):
        c = run_checker(sgtest.SOURCE_DIR)
        self.assertEqual(c.failures, [], "\n" + "\n".join(c.failures))
        kinds = {}
        for where, kind in c.checked:
            kinds.setdefault(where.split(":")[0], set()).add(kind)
        # what must be checked, so that the checker cannot pass by checking nothing
        self.assertTrue({"verl-tools", "slime-config", "rlinf-config", "gateway-config", "shell:asearcher-address",
                         "shell:overrides"} <= kinds["docs/clients.md"], kinds["docs/clients.md"])
        self.assertTrue({"verl-tools", "verl-mcp-servers", "shell:curl"} <= kinds["docs/mcp.md"], kinds["docs/mcp.md"])
        self.assertIn("gateway-config", kinds["docs/configuration.md"])
        self.assertIn("shell:curl", kinds["README.md"])
        table_kinds = {"table:overrides", "table:verl-tools", "table:slime-config", "table:rlinf-config", "table:asearcher-address"}
        self.assertTrue(table_kinds | {"table:url"} <= kinds["README.md"], kinds["README.md"])  # its client table
        self.assertTrue(table_kinds | {"table:skyrl-config"} <= kinds["docs/clients.md"], kinds["docs/clients.md"])  # the CI table
        self.assertIn("prometheus-rules", kinds["docs/operations.md"])
        skipped = {re.sub(r".*\((.*)\)$", r"\1", s) for s in c.skipped}
        self.assertIn("budget-object", skipped)


class SeededBreaks(unittest.TestCase):
    """Copies the repository's pages, breaks snippets the way issue 24 found them broken, and
    requires the checker to name each one."""

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="sgdocs-seed-")
        self.addCleanup(shutil.rmtree, self.root, True)
        shutil.copy(os.path.join(sgtest.SOURCE_DIR, "README.md"), self.root)
        shutil.copytree(os.path.join(sgtest.SOURCE_DIR, "docs"), os.path.join(self.root, "docs"))
        shutil.copytree(os.path.join(sgtest.SOURCE_DIR, "configs"), os.path.join(self.root, "configs"))  # routes named

    def edit(self, rel, old, new):
        p = os.path.join(self.root, rel)
        with open(p) as f:
            s = f.read()
        self.assertIn(old, s, "%s no longer contains the seed's target" % rel)
        with open(p, "w") as f:
            f.write(s.replace(old, new, 1))

    def failures_of(self, rel):
        return [f for f in run_checker(self.root).failures if f.startswith(rel + ":")]

    def test_seeded_breaks_in_the_real_pages(self):
        self.edit("docs/mcp.md", "      type: mcp\n", "      use_mcp: true\n")  # item 1 of the issue
        self.edit("docs/clients.md", '        "proxy": None,\n', "")  # item 2: slime's KeyError
        self.edit("docs/clients.md", '"search_url": "http://127.0.0.1:8000/retrieve",', '"search_url": "http://127.0.0.1:8000/retrieve/bing",')  # no config of the section defines it
        self.edit("docs/clients.md", "      type: native\n", "")  # item 3: verl's ToolType
        self.edit("docs/configuration.md", '"chunk": 64, "timeout_ms": 25000,', '"chunk": 64, "timeout_ms": 25000, "retries": -1,')
        self.edit("README.md", "what is a volcano", "what is a volcano\\x")  # a curl example that gets a 400
        self.edit("docs/api.md", "[protocols.md](protocols.md#the-retrieve-contract)", "protocols.md §4 and platform.md")
        mcp = "\n".join(self.failures_of("docs/mcp.md"))
        self.assertIn('config.type must be "native" or "mcp"', mcp)
        clients = "\n".join(self.failures_of("docs/clients.md"))
        self.assertIn("SEARCH_R1_CONFIGS['local']['proxy'] is required", clients)
        self.assertRegex(clients, r"/retrieve/bing answers 404")
        self.assertIn('config.type must be "native" or "mcp"', clients)
        self.assertIn("retries: expected an integer in [0, 10], got -1", "\n".join(self.failures_of("docs/configuration.md")))
        self.assertRegex("\n".join(self.failures_of("README.md")), r"gets HTTP 400")
        api = "\n".join(self.failures_of("docs/api.md"))
        self.assertIn("names platform.md, which is not in the repository", api)
        self.assertIn("cites `protocols.md §4`: docs/protocols.md has no numbered sections", api)
        self.assertIn("a section sign (§)", api)

    def test_seeded_breaks_in_tables(self):
        """Inline code in table rows: the slime row of clients.md's CI table without `proxy` (the
        KeyError of issue 24 item 2, back in a table), README's verl row naming a route no config
        defines, and its RLinf row with a scheme."""
        self.assertEqual(self.failures_of("docs/clients.md"), [])
        self.edit("docs/clients.md", '"http://127.0.0.1:8000/retrieve/mock", "proxy": None}`', '"http://127.0.0.1:8000/retrieve/mock"}`')
        self.edit("README.md", "`retrieval_service_url: http://127.0.0.1:8000/retrieve`", "`retrieval_service_url: http://127.0.0.1:8000/retrieve/google`")
        self.edit("README.md", "`tools.search.server_addr: 127.0.0.1:8000`", "`tools.search.server_addr: http://127.0.0.1:8000`")
        clients = "\n".join(self.failures_of("docs/clients.md"))
        self.assertRegex(clients, r"docs/clients\.md:\d+: table cell `\"search_backend\": \"local\".*SEARCH_R1_CONFIGS\['local'\]\['proxy'\] is "
                                  r"required")
        readme = "\n".join(self.failures_of("README.md"))
        self.assertRegex(readme, r"README\.md:\d+: table cell `retrieval_service_url: .*/retrieve/google answers 404")
        self.assertRegex(readme, r"README\.md:\d+: table cell `tools\.search\.server_addr: .*must be host:port without scheme")


PAGE = '''# A page of seeded snippets

A gateway config that --check refuses:

```json
{"backends": [{"name": "x", "plugin": "example", "topk": 0, "config": {"documents": [{"id": "0", "contents": "a"}]}}]}
```

A good one:

```json
{"backends": [{"name": "good", "plugin": "example", "config": {"documents": [{"id": "0", "contents": "\\"A\\"\\na"}]}}]}
```

An unmarked fragment:

```json
"budget": {"queries": 5}
```

A marked one (a fragment):

<!-- snippet named-fragment: partial (a key of a route) -->
```json
"budget": {"queries": 5}
```

```yaml
tools:
  search:
    server_addr: http://127.0.0.1:8000
    topk: 3
```

```sh
python3 -m trainer environment.skyrl_gym.search.url=http://127.0.0.1:8000/retrieve
echo 127.0.0.1:8000 > "$RAG_SERVER_ADDR_DIR/gateway.txt"
searchgate --config gw.json --port 0 --address-file "$RAG_SERVER_ADDR_DIR/gw.addr"
curl -s localhost:8000/retrieve/nosuch -d '{"queries": ["x"]}'
```

```json
{"mcpServers": {"gw": {"url": "http://127.0.0.1:8000/mcp", "auth_token": "k"}}}
```

See [the other page](other.md#nowhere) and [api](api.md#no-such-heading).

| framework | setting |
| --- | --- |
| slime | `"search_backend": "local", "local": {"search_url": "http://127.0.0.1:8000/retrieve"}` |
| slime, change only the URL | `"local": {"search_url": "http://127.0.0.1:8000/retrieve"}` |
| RLinf | `server_addr: http://127.0.0.1:8000` |
| verl | `retrieval_service_url: http://127.0.0.1:8000/retrieve/nosuch` |
| SkyRL | `search_url: http://127.0.0.1:8000/retrieve` |
'''


class SeededPage(unittest.TestCase):
    def test_each_seed_is_named_and_the_marked_fragment_skipped(self):
        root = tempfile.mkdtemp(prefix="sgdocs-page-")
        try:
            os.makedirs(os.path.join(root, "docs"))
            with open(os.path.join(root, "docs", "seeded.md"), "w") as f:
                f.write(PAGE)
            with open(os.path.join(root, "docs", "api.md"), "w") as f:
                f.write("# API\n")
            # a checkout: the comments of its code are checked for the same citations
            os.makedirs(os.path.join(root, "src"))
            with open(os.path.join(root, "src", "a.c"), "w") as f:
                f.write('/* the layout: protocols.md 6.2 */\n/* the order of style.md 1.8 */\nstatic const char *s = "\u00a7";\n')
            with open(os.path.join(root, "src", "b.py"), "w") as f:
                f.write('"""As platform.md section 6 describes (\u00a74.5)."""\n')
            subprocess.run(["git", "init", "-q", root], check=True)
            subprocess.run(["git", "-C", root, "add", "src"], check=True)
            c = run_checker(root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        text = "\n".join(c.failures)
        lines = {int(m) for m in re.findall(r"^docs/seeded\.md:(\d+)", text, re.M)}
        line_of = lambda s: PAGE[:PAGE.index(s)].count("\n") + 1  # noqa: E731
        expect = ["searchgate --check refuses it", "not valid JSON", "server_addr must be host:port",
                  "SkyRL override environment.skyrl_gym.search.url", "gateway.txt: the client globs Host*_IP*.txt",
                  "gw.addr: the client globs Host*_IP*.txt",
                  "/retrieve/nosuch -d '{\"queries\": [\"x\"]}'` gets HTTP 404", "its url must end in /sse", "link to other.md#nowhere: no such file",
                  "link to api.md#no-such-heading: api.md has no heading #no-such-heading"]
        for e in expect:
            self.assertIn(e, text)
        self.assertIn("src/a.c:1: cites `protocols.md 6.2`: docs/protocols.md has no numbered sections", text)
        self.assertIn("src/a.c:2: cites style.md, which is not part of the repository", text)
        self.assertNotIn("src/a.c:3", text)  # a section sign that is data
        self.assertIn("src/b.py:1: cites platform.md", text)
        self.assertIn("src/b.py:1: a section sign", text)
        for row, cell, problem in (("| slime |", '"search_backend": "local"', "SEARCH_R1_CONFIGS['local']['proxy'] is required"),
                                   ("| RLinf |", "server_addr: http://", "must be host:port without scheme"),
                                   ("| verl |", "retrieval_service_url: ", "/retrieve/nosuch answers 404")):
            self.assertRegex(text, r"docs/seeded\.md:%d: table cell `%s[^\n]*%s" % (line_of(row), re.escape(cell), re.escape(problem)))
        self.assertNotIn(line_of("slime, change only"), lines)  # a row that says "change only" may show one key
        self.assertNotIn(line_of("| SkyRL |"), lines)
        self.assertNotIn(line_of('{"backends": [{"name": "good"') - 1, lines)  # the good config passes
        self.assertIn(line_of('{"backends": [{"name": "x"') - 1, lines)
        fence = line_of("<!-- snippet named-fragment") + 1
        self.assertEqual([s for s in c.skipped if "named-fragment" in s], ["docs/seeded.md:%d (named-fragment)" % fence])
        self.assertNotIn(fence, lines)


if __name__ == "__main__":
    sgtest.main()
