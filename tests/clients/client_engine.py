"""Executes the client models of client_models.py against a server.

One engine for every model: it forms the URL and the body the model describes, sends attempts with
the model's HTTP library (requests for the synchronous clients, aiohttp for the asynchronous ones,
since what the library does with an answer is part of the client's behaviour), classifies each
attempt's outcome, sleeps and retries as the model's schedule says, and ends with what the model
hands on: an Answer, or the exception the client would raise.

Sleeps are counted in a Ledger, not waited (an asynchronous sleep still yields to the loop), so a
test measures the time a client takes to answer (its sleeps plus the wall time of its requests)
without spending it.
"""
import asyncio
import glob
import json
import os
import random
import time
import uuid

import aiohttp
import requests

from client_models import (CONNECT, DECODE, HTTP_ERROR, OTHER, READ, STATUS, TIMEOUT, BrowserResults, FirstQueryDocs,
                           Pages, PassagesText)


class Ledger:
    """What one client call cost: the sleeps it asked for (seconds, each one) and its attempts.
    With wait=True the sleeps are also waited; on_sleep(seconds) is called at each (a test can
    change the world there, as time passing would)."""

    def __init__(self, wait=False, on_sleep=None):
        self.wait, self.on_sleep = wait, on_sleep
        self.seconds = 0.0
        self.sleeps = []
        self.attempts = 0

    def _count(self, seconds):
        self.sleeps.append(seconds)
        self.seconds += seconds
        if self.on_sleep is not None:
            self.on_sleep(seconds)

    def sleep(self, seconds):
        self._count(seconds)
        if self.wait:
            time.sleep(seconds)

    async def sleep_async(self, seconds):
        self._count(seconds)
        await asyncio.sleep(seconds if self.wait else 0)


class Answer:
    """What the client hands on: kind "observation" (it read an answer), "error-text" (a text
    about a failure, given to the model as an observation) or "empty" (an empty result after a
    failure); `value` is the text or structure itself."""

    def __init__(self, kind, value):
        self.kind, self.value = kind, value

    def __repr__(self):
        return "Answer(%s, %r)" % (self.kind, str(self.value)[:160])


class Failure:
    def __init__(self, kind, exc=None, status=None):
        self.kind, self.exc, self.status = kind, exc, status


# ---- where the request goes and what it carries ----

class Address:
    """The URL of the next attempt: the configured URL, http://{host:port}{path}, or a line of an
    address file picked at random (the line as read, newline included)."""

    def __init__(self, endpoint, target):
        self.endpoint = endpoint
        if endpoint.kind == "url":
            self.url = target
        elif endpoint.kind == "hostport":
            self.url = "http://%s%s" % (target, endpoint.path)
        elif endpoint.kind == "files":
            self.pick()
        else:
            raise ValueError("unknown endpoint kind %r" % endpoint.kind)

    def pick(self):
        e = self.endpoint
        lines = []
        for name in glob.glob(os.environ.get(e.env, "") + "/" + e.pattern):
            try:
                with open(name) as f:
                    lines.extend(f.readlines())
            except OSError:
                continue
        if not lines:  # the client's random.choice of an empty list
            raise IndexError("no server address in $%s/%s" % (e.env, e.pattern))
        self.url = "http://%s%s" % (random.choice(lines), e.path)

    def after_failure(self):
        if self.endpoint.kind == "files" and self.endpoint.rechoose:
            self.pick()


def request_body(call, items):
    if call.body == "queries":
        body = {"queries": list(items)}
    elif call.body == "query":
        body = {"query": items[0]}
    elif call.body == "urls":
        body = {"urls": list(items)}
    else:
        raise ValueError("unknown body kind %r" % call.body)
    body.update(call.fields)
    return body


# ---- what the client reads from a 2xx body ----

def _wrapped(view, text):
    if isinstance(view, PassagesText) and view.wrap_json:
        return json.dumps({"result": text}, ensure_ascii=view.wrap_json == "ascii")
    return text


def _passages_block(view, docs):
    out = []
    for n, item in enumerate(docs, 1):
        contents = item
        for key in view.contents_at:
            contents = contents[key]
        if view.strip_contents:
            contents = contents.strip()
        title, _, text = contents.partition("\n")
        out.append(view.doc.format(n=n, title=title, text=text, contents=contents))
    block = "".join(out)
    return block.strip() if view.strip_block else block


def _read_passages(view, data):
    if view.falsy_body is not None and not data:
        return Answer("error-text", _wrapped(view, view.falsy_body))
    try:
        results = data["result"] if view.result_required else data.get("result", [])
        if not results and view.no_results is not None:
            return Answer("observation", _wrapped(view, view.no_results))
        blocks = [_passages_block(view, docs) for docs in results]
    except Exception as e:  # noqa: BLE001 - the tool's own handler, when the model has one
        if view.read_error is None:
            raise
        return Answer("error-text", _wrapped(view, view.read_error.format(error=e)))
    return Answer("observation", blocks if view.join is None else _wrapped(view, view.join.join(blocks)))


def _read_first_query(view, data):
    docs = []
    for item in data.get("result", [[]])[0]:
        if isinstance(item, dict):
            contents = item.get("contents", "")
            docs.append({"document": {"contents": contents if contents else view.placeholder}})
    return Answer("observation", docs)


def _read_browser(view, data):
    return Answer("observation", [{"documents": [d["contents"] for d in docs], "urls": [d["url"] for d in docs],
                                   "server_type": view.server_type} for docs in data["result"]])


def _read_pages(view, data):
    pages = [{"page": "" if p is None else p["contents"], "type": "access", "server_type": view.server_type}
             for p in data["result"]]
    if view.shown is None:
        return Answer("observation", pages)
    limit, empty = view.shown
    page = pages[0].get("page", "")
    return Answer("observation", page[:limit] if page is not None and page.strip() != "" else empty)


_READERS = {PassagesText: _read_passages, FirstQueryDocs: _read_first_query, BrowserResults: _read_browser,
            Pages: _read_pages}


def read_answer(view, data):
    """What the client makes of a 2xx JSON body; raises what its reading raises."""
    return _READERS[type(view)](view, data)


# ---- the retry loop, shared by both libraries ----

def _message(call, failure, attempt):
    template = call.messages.get(failure.kind, call.messages.get(OTHER, "{exc}"))
    return template.format(status=failure.status, attempt=attempt, attempts=call.retry.attempts, exc=failure.exc)


def _after_failure(call, n, failure):
    """(seconds to sleep, whether another attempt follows) after failed attempt n."""
    if failure.kind not in call.retry_on:
        return 0, False
    more = n < call.retry.attempts
    return (call.retry.delay(n) if more or call.retry.after_last else 0), more


def _give_up(call, failure, attempt):
    g = call.give_up
    if g.kind == "propagate":
        raise failure.exc
    if g.kind == "raise":
        raise RuntimeError(g.text) from failure.exc
    if g.kind == "value":
        return Answer("empty", json.loads(json.dumps(g.value)))
    text = g.text.format(error=_message(call, failure, attempt), request_id=uuid.uuid4())
    return Answer("error-text", _wrapped(call.view, text))


def _settle(call, failure, data):
    """An attempt that got a body and reads it inside the retried block: a read error is a failure."""
    if failure is not None or not call.read_in_retry:
        return failure, None
    try:
        return None, read_answer(call.view, data)
    except Exception as e:  # noqa: BLE001 - any exception of the reading is the attempt's failure
        return Failure(READ, e), None


class _Loop:
    """The attempts of one call: after each, an answer, or a sleep and another attempt, or giving up."""

    def __init__(self, call, target, items, ledger):
        self.call, self.ledger = call, ledger
        self.address = Address(call.endpoint, target)
        self.body = request_body(call, items)
        self.n = 0
        self.failure = None

    def next_url(self):
        self.n += 1
        self.ledger.attempts += 1
        return self.address.url

    def outcome(self, failure, data):
        """("answer", Answer), ("retry", seconds to sleep) or ("give-up", seconds to sleep first);
        raises what the client raises while reading."""
        failure, answer = _settle(self.call, failure, data)
        if failure is None:
            return "answer", answer if answer is not None else read_answer(self.call.view, data)
        self.failure = failure
        sleep, more = _after_failure(self.call, self.n, failure)
        if failure.kind in self.call.retry_on:
            self.address.after_failure()
        return ("retry" if more else "give-up"), sleep

    def give_up(self):
        return _give_up(self.call, self.failure, self.n)


# ---- requests ----

def _attempt_requests(call, post, url, body):
    kwargs = {"json": body, "timeout": call.transport.timeout}
    if call.headers:
        kwargs["headers"] = dict(call.headers)
    try:
        resp = post(url, **kwargs)
        if resp.status_code in call.retry_statuses:
            return Failure(STATUS, status=resp.status_code), None
        if call.raise_for_status:
            resp.raise_for_status()
        return None, resp.json()
    except requests.exceptions.ConnectionError as e:  # a connect timeout is one too, and listed first
        return Failure(CONNECT, e), None
    except requests.exceptions.Timeout as e:
        return Failure(TIMEOUT, e), None
    except requests.exceptions.HTTPError as e:
        return Failure(HTTP_ERROR, e), None
    except ValueError as e:  # requests' JSONDecodeError
        return Failure(DECODE, e), None
    except requests.exceptions.RequestException as e:
        return Failure(OTHER, e), None


def _requests_session(transport):
    if transport.session != "shared":
        return None
    s = requests.Session()
    if transport.pool:
        adapter = requests.adapters.HTTPAdapter(pool_connections=transport.pool[0], pool_maxsize=transport.pool[1],
                                                max_retries=0, pool_block=False)
        s.mount("http://", adapter)
        s.mount("https://", adapter)
    return s


def _run_requests(call, target, items, ledger):
    loop = _Loop(call, target, items, ledger)
    session = _requests_session(call.transport)
    post = session.post if session is not None else requests.post
    try:
        while True:
            verdict, value = loop.outcome(*_attempt_requests(call, post, loop.next_url(), loop.body))
            if verdict == "answer":
                return value
            if value:
                ledger.sleep(value)
            if verdict == "give-up":
                return loop.give_up()
    finally:
        if session is not None:
            session.close()


# ---- aiohttp ----

async def _exchange(call, session, url, kwargs):
    async with session.post(url, **kwargs) as resp:
        if resp.status in call.retry_statuses:
            return Failure(STATUS, status=resp.status), None
        if call.raise_for_status:
            resp.raise_for_status()
        return None, await resp.json()


async def _attempt_aiohttp(call, shared, url, body):
    t = call.transport
    kwargs = {"json": body}
    if call.headers:
        kwargs["headers"] = dict(call.headers)
    if t.timeout is not None and t.timeout_at == "request":
        kwargs["timeout"] = aiohttp.ClientTimeout(**t.timeout)
    try:
        if shared is not None:
            return await _exchange(call, shared, url, kwargs)
        async with aiohttp.ClientSession(trust_env=t.trust_env) as session:
            return await _exchange(call, session, url, kwargs)
    except aiohttp.ContentTypeError as e:  # a body not labelled JSON: resp.json() refuses it
        return Failure(DECODE, e), None
    except aiohttp.ClientResponseError as e:
        return Failure(HTTP_ERROR, e), None
    except asyncio.TimeoutError as e:  # before ClientConnectionError: a ServerTimeoutError is both
        return Failure(TIMEOUT, e), None
    except aiohttp.ClientConnectionError as e:
        return Failure(CONNECT, e), None
    except ValueError as e:  # json.JSONDecodeError
        return Failure(DECODE, e), None
    except Exception as e:  # noqa: BLE001 - anything else the library raises
        return Failure(OTHER, e), None


def _aiohttp_session(transport):
    if transport.session != "shared":
        return None
    kwargs = {"trust_env": transport.trust_env}
    if transport.pool:
        kwargs["connector"] = aiohttp.TCPConnector(limit=transport.pool[0], limit_per_host=transport.pool[1])
    if transport.timeout is not None and transport.timeout_at == "session":
        kwargs["timeout"] = aiohttp.ClientTimeout(**transport.timeout)
    return aiohttp.ClientSession(**kwargs)


async def _run_aiohttp(call, target, items, ledger):
    loop = _Loop(call, target, items, ledger)
    shared = _aiohttp_session(call.transport)
    try:
        while True:
            verdict, value = loop.outcome(*await _attempt_aiohttp(call, shared, loop.next_url(), loop.body))
            if verdict == "answer":
                return value
            if value:
                await ledger.sleep_async(value)
            if verdict == "give-up":
                return loop.give_up()
    finally:
        if shared is not None:
            await shared.close()


# ---- entry points ----

async def call_async(client, operation, target, items, ledger=None):
    """Runs `operation` ("search" or "access") of `client` (a client_models.Client) once, from
    inside an event loop. target: the URL for a client configured with one, host:port for one
    configured with an address, None for one that reads address files; items: the queries or
    URLs. Returns an Answer or raises what the client raises."""
    call = client.calls[operation]
    ledger = ledger if ledger is not None else Ledger()
    if call.transport.library == "aiohttp":
        return await _run_aiohttp(call, target, items, ledger)
    return _run_requests(call, target, items, ledger)


def call(client, operation, target, items, ledger=None):
    """call_async for a caller without an event loop (each aiohttp call gets a loop of its own)."""
    c = client.calls[operation]
    ledger = ledger if ledger is not None else Ledger()
    if c.transport.library == "aiohttp":
        return asyncio.run(_run_aiohttp(c, target, items, ledger))
    return _run_requests(c, target, items, ledger)
