"""The retrieval clients of the RL frameworks searchgate serves, transcribed from their source so
that the tests can run their real request, retry and parsing logic against the gateway.

The frameworks themselves cannot be installed here (they pull in torch, Ray, sglang ...), so each
client function below is a faithful transcription of the one named above it: the same HTTP
library, the same request, the same status checks, the same retry loop with the same constants and
sleeps, the same parsing. Only logging/print lines are left out and module-level configuration is
turned into arguments. Each is pinned to the commit it was read from (all Apache-2.0).

Sleeps are the clients' own `time.sleep(...)` / `asyncio.sleep(...)` calls: a test can patch them
with SleepLedger to count the seconds a client would wait instead of waiting them.
"""
import asyncio
import glob
import json
import os
import random
import time
import unittest.mock

import aiohttp
import requests

# (repository, commit) of every snapshot read; tests/docs/framework_keys.py pins the same ones.
PINS = {
    "verl": ("volcengine/verl", "b178a3cd56f58b2d502255daba591e92833930a7"),
    "skyrl": ("NovaSky-AI/SkyRL", "a9564572eb8e91076be43c1bd5e4615e3de17265"),
    "search-r1": ("PeterGriffinJin/Search-R1", "a14dc3a4ffc6fe88c1e95038d9738e21ba3f7a06"),
    "slime": ("THUDM/slime", "624b824a898ab0ec1fcb4d373004c7f3852bf515"),
    "rlinf": ("RLinf/RLinf", "a3816b596478dcd8a5c69a6ec1468c9519f77b5b"),
    "asearcher": ("inclusionAI/ASearcher", "813e804fc3b24b661b4f5625c77343d5daa14a03"),
}


class SleepLedger:
    """Patches time.sleep and asyncio.sleep: the seconds the client code asks to sleep are added
    up (sleeps of 0, which only yield, still yield) and nothing waits."""

    def __init__(self):
        self.seconds = 0.0
        self.calls = []
        self._real_async_sleep = asyncio.sleep

    def __enter__(self):
        ledger = self

        def sync_sleep(s):
            ledger.calls.append(s)
            ledger.seconds += s

        async def async_sleep(s, result=None):
            if s > 0:
                ledger.calls.append(s)
                ledger.seconds += s
            await ledger._real_async_sleep(0)
            return result

        self._patches = [unittest.mock.patch.object(time, "sleep", sync_sleep),
                         unittest.mock.patch.object(asyncio, "sleep", async_sleep)]
        for p in self._patches:
            p.start()
        return self

    def __exit__(self, *exc):
        for p in reversed(self._patches):
            p.stop()
        return False


# ---- verl: verl/tools/utils/search_r1_like_utils.py, call_search_api + perform_single_search_batch ----
VERL_MAX_RETRIES = 10
VERL_INITIAL_RETRY_DELAY = 1


def verl_call_search_api(retrieval_service_url, query_list, topk=3, return_scores=True, timeout=30):
    payload = {"queries": query_list, "topk": topk, "return_scores": return_scores}
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    last_error = None
    for attempt in range(VERL_MAX_RETRIES):
        try:
            response = requests.post(retrieval_service_url, headers=headers, json=payload, timeout=timeout)
            if response.status_code in [500, 502, 503, 504]:
                last_error = f"API Request Error: Server Error ({response.status_code}) on attempt {attempt + 1}/{VERL_MAX_RETRIES}"
                if attempt < VERL_MAX_RETRIES - 1:
                    delay = VERL_INITIAL_RETRY_DELAY * (attempt + 1)
                    time.sleep(delay)
                continue
            response.raise_for_status()
            return response.json(), None
        except requests.exceptions.ConnectionError as e:
            last_error = f"Connection Error: {e}"
            if attempt < VERL_MAX_RETRIES - 1:
                time.sleep(VERL_INITIAL_RETRY_DELAY * (attempt + 1))
            continue
        except requests.exceptions.Timeout as e:
            last_error = f"Timeout Error: {e}"
            if attempt < VERL_MAX_RETRIES - 1:
                time.sleep(VERL_INITIAL_RETRY_DELAY * (attempt + 1))
            continue
        except requests.exceptions.RequestException as e:
            last_error = f"API Request Error: {e}"
            break
        except json.JSONDecodeError as e:
            last_error = f"API Response JSON Decode Error: {e}"
            break
        except Exception as e:  # noqa: BLE001 - transcribed
            last_error = f"Unexpected Error: {e}"
            break
    return None, ("API Call Failed: " + last_error) if last_error else "API Call Failed after retries"


def verl_search_tool_text(retrieval_service_url, query_list, topk=3, timeout=30):
    """perform_single_search_batch: the text verl's SearchTool hands the model."""
    api_response, error_msg = verl_call_search_api(retrieval_service_url, query_list, topk, True, timeout)
    if error_msg:
        return json.dumps({"result": f"Search error: {error_msg}"}, ensure_ascii=False)
    raw_results = api_response.get("result", [])
    if not raw_results:
        return json.dumps({"result": "No search results found."}, ensure_ascii=False)
    pretty = []
    for retrieval in raw_results:
        ref = ""
        for idx, doc_item in enumerate(retrieval):
            content = doc_item["document"]["contents"]
            title = content.split("\n")[0]
            text = "\n".join(content.split("\n")[1:])
            ref += f"Doc {idx + 1} (Title: {title})\n{text}\n\n"
        pretty.append(ref.strip())
    return json.dumps({"result": "\n---\n".join(pretty)}, ensure_ascii=False)


# ---- SkyRL: skyrl-gym/skyrl_gym/tools/search.py, call_search_api (one query, "query" form, shared session) ----
def skyrl_call_search_api(retrieval_service_url, query, topk=3, return_scores=True, timeout=30, session=None):
    payload = {"query": query, "topk": topk, "return_scores": return_scores}
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if session is None:
        session = requests.Session()
        should_close_session = True
    else:
        should_close_session = False
    last_error = None
    for attempt in range(10):
        try:
            response = session.post(retrieval_service_url, headers=headers, json=payload, timeout=timeout)
            if response.status_code in [500, 502, 503, 504]:
                last_error = f"API Request Error: Server Error ({response.status_code}) on attempt {attempt + 1}/10"
                if attempt < 10 - 1:
                    time.sleep(1 * (attempt + 1))
                continue
            response.raise_for_status()
            if should_close_session:
                session.close()
            return response.json(), None
        except requests.exceptions.ConnectionError as e:
            last_error = f"Connection Error: {e}"
            if attempt < 10 - 1:
                time.sleep(1 * (attempt + 1))
            continue
        except requests.exceptions.Timeout as e:
            last_error = f"Timeout Error: {e}"
            if attempt < 10 - 1:
                time.sleep(1 * (attempt + 1))
            continue
        except requests.exceptions.RequestException as e:
            last_error = f"API Request Error: {e}"
            break
        except json.JSONDecodeError as e:
            last_error = f"API Response JSON Decode Error: {e}"
            break
        except Exception as e:  # noqa: BLE001 - transcribed
            last_error = f"Unexpected Error: {e}"
            break
    if should_close_session:
        session.close()
    return None, last_error


# ---- Search-R1 training loop: search_r1/llm_agent/generation.py, batch_search + _batch_search ----
def search_r1_batch_search(search_url, queries, topk=3):
    """No timeout, no retry: a body without "result" raises out of the training step."""
    payload = {"queries": queries, "topk": topk, "return_scores": True}
    results = requests.post(search_url, json=payload).json()["result"]
    out = []
    for result in results:
        ref = ""
        for idx, doc_item in enumerate(result):
            content = doc_item["document"]["contents"]
            title = content.split("\n")[0]
            text = "\n".join(content.split("\n")[1:])
            ref += f"Doc {idx+1}(Title: {title}) {text}\n"
        out.append(ref)
    return out


# ---- slime: examples/search-r1/local_search_server.py, local_search; generate_with_search.py, search ----
async def slime_local_search(search_url, query, top_k=5, timeout=60, proxy=None):
    payload = {"queries": [query], "topk": top_k, "return_scores": False}
    timeout_obj = aiohttp.ClientTimeout(total=timeout)
    session_kwargs = {}
    if proxy:
        session_kwargs["proxy"] = proxy
    try:
        async with aiohttp.ClientSession(**session_kwargs) as session:
            async with session.post(search_url, json=payload, timeout=timeout_obj) as resp:
                resp.raise_for_status()
                result = await resp.json()
    except Exception:  # noqa: BLE001 - transcribed: slime prints the error and returns no documents
        return []
    retrieval_results = result.get("result", [[]])[0]
    contexts = []
    for item in retrieval_results:
        if isinstance(item, dict):
            content = item.get("contents", "")
            if content:
                contexts.append({"document": {"contents": content}})
            else:
                contexts.append({"document": {"contents": '"No title."\nNo snippet available.'}})
    return contexts


async def slime_search(search_r1_configs, query):
    """generate_with_search.search for the "local" backend: reads the local dict's search_url and,
    without a guard, its "proxy" key."""
    backend = search_r1_configs["search_backend"]
    if backend == "local":
        local_config = search_r1_configs["local"]
        return await slime_local_search(local_config["search_url"], query, search_r1_configs["topk"],
                                        proxy=local_config["proxy"])
    raise ValueError(f"Unknown search backend: {backend}.")


# ---- RLinf WideSeek-R1 (local): rlinf/agents/wideseek_r1/tools.py, AsyncSearchClient ----
class RLinfWideSeekClient:
    def __init__(self, server_addr):
        self.server_addr = server_addr
        self._session = None

    async def get_session(self):
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=2000, limit_per_host=1000, ttl_dns_cache=1000, enable_cleanup_closed=True)
            self._session = aiohttp.ClientSession(connector=connector,
                                                  timeout=aiohttp.ClientTimeout(total=300, sock_connect=100), trust_env=False)
        return self._session

    async def close(self):
        if self._session is not None:
            await self._session.close()

    async def query_async(self, req_meta):
        cnt = 0
        last_exception = None
        session = await self.get_session()
        while cnt < 10:
            try:
                async with session.post(f"http://{self.server_addr}/retrieve", json=req_meta) as response:
                    response.raise_for_status()
                    res = await response.json()
                    return [{"documents": [r["contents"] for r in result], "urls": [r["url"] for r in result],
                             "server_type": "async-search-browser"} for result in res["result"]]
            except Exception as e:  # noqa: BLE001 - transcribed
                last_exception = e
                cnt += 1
                await asyncio.sleep(10)
        raise RuntimeError("Fail to post search query to RAG server") from last_exception

    async def access_async(self, urls):
        cnt = 0
        last_exception = None
        session = await self.get_session()
        while cnt < 10:
            try:
                async with session.post(f"http://{self.server_addr}/access", json={"urls": urls}) as response:
                    response.raise_for_status()
                    res = await response.json()
                    return [{"page": result["contents"] if result is not None else "", "type": "access",
                             "server_type": "async-search-browser"} for result in res["result"]]
            except Exception as e:  # noqa: BLE001 - transcribed
                last_exception = e
                cnt += 1
                await asyncio.sleep(10)
        raise RuntimeError("Fail to post access request to RAG server") from last_exception


def rlinf_wideseek_access_text(response, access_token=5000):
    """WideSeekR1ToolWorker's process_tool_result for "access": what the model is shown."""
    page = response[0].get("page", "")
    if page is not None and page.strip() != "":
        return page[:access_token]
    return "No More Information is Found for this URL."


# ---- RLinf Search-R1 recipe: rlinf/agents/searchr1/search_tool_worker.py, AsyncSearchClient.query_async ----
async def rlinf_searchr1_query_async(server_addr, req_meta):
    cnt = 0
    last_exception = None
    while cnt < 10:
        try:
            async with aiohttp.ClientSession() as session:
                async with session.post(f"http://{server_addr}/retrieve", json=req_meta,
                                        timeout=aiohttp.ClientTimeout(total=120, sock_connect=120)) as response:
                    response.raise_for_status()
                    res = await response.json()
                    return [{"documents": [r["contents"] for r in result], "urls": [r["url"] for r in result],
                             "server_type": "async-search-browser"} for result in res["result"]]
        except Exception as e:  # noqa: BLE001 - transcribed
            last_exception = e
            cnt += 1
            await asyncio.sleep(10)
    raise RuntimeError("Fail to post search query to RAG server") from last_exception


# ---- ASearcher (training): AReaL/ASearcher/utils/search_utils.py, AsyncSearchBrowserClient ----
class ASearcherClient:
    def __init__(self):
        self.server_list = self.get_server_list()
        self.server_addr = random.choice(self.server_list)

    def get_server_list(self):
        rag_server_addr_dir = os.environ.get("RAG_SERVER_ADDR_DIR", "")
        server_list = []
        for filename in glob.glob(rag_server_addr_dir + "/Host*_IP*.txt"):
            try:
                server_list.extend(open(filename).readlines())
            except Exception:  # noqa: BLE001 - transcribed (a bare except)
                continue
        return server_list

    async def _post(self, path, body):
        async with aiohttp.ClientSession() as session:
            async with session.post(f"http://{self.server_addr}{path}", json=body,
                                    timeout=aiohttp.ClientTimeout(total=120, sock_connect=120)) as response:
                response.raise_for_status()
                return await response.json()

    async def query_async(self, req_meta):
        cnt = 0
        last_exception = None
        while cnt < 10:
            try:
                res = await self._post("/retrieve", req_meta)
                return [dict(documents=[r["contents"] for r in result], urls=[r["url"] for r in result],
                             server_type="async-search-browser") for result in res["result"]]
            except Exception as e:  # noqa: BLE001 - transcribed
                last_exception = e
                self.server_list = self.get_server_list()
                self.server_addr = random.choice(self.server_list)
                cnt += 1
                await asyncio.sleep(10)
        raise RuntimeError("Fail to post search query to RAG server") from last_exception

    async def access_async(self, urls):
        cnt = 0
        last_exception = None
        while cnt < 10:
            try:
                res = await self._post("/access", {"urls": urls})
                return [dict(page=result["contents"] if result is not None else "", type="access",
                             server_type="async-search-browser") for result in res["result"]]
            except Exception as e:  # noqa: BLE001 - transcribed
                last_exception = e
                self.server_list = self.get_server_list()
                self.server_addr = random.choice(self.server_list)
                cnt += 1
                await asyncio.sleep(10)
        raise RuntimeError("Fail to post access request to RAG server") from last_exception
