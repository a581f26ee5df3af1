// The official MCP TypeScript SDK against searchgate: connects over streamable HTTP (JSON replies,
// then SSE-framed replies) and over the older HTTP+SSE transport, with a Bearer key, lists the
// tools, calls them, and prints what it got as one JSON object for test_sdk.py to check against
// POST /retrieve. The SDK itself validates every result against the tool's outputSchema.
// Usage: node sdk_test.mjs BASE_URL KEY
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';

const [base, key] = process.argv.slice(2);
const headers = { Authorization: `Bearer ${key}` };
const CALLS = [
  { name: 'search', arguments: { query: 'paris' } },
  { name: 'search', arguments: { queries: ['hamlet', 'tokyo'], topk: 2 } },
  { name: 'search_wiki', arguments: { query: 'redis', topk: 1 } },
  { name: 'access_wiki', arguments: { url: 'https://en.wikipedia.org/wiki/Hamlet' } },
];

// a fetch that asks for text/event-stream first, so POST /mcp answers are SSE-framed
const preferSse = (url, init) => {
  const h = new Headers(init?.headers);
  h.set('accept', 'text/event-stream, application/json;q=0.5');
  return fetch(url, { ...init, headers: h });
};

function transportFor(kind) {
  if (kind === 'sse') return new SSEClientTransport(new URL('/sse', base), { requestInit: { headers } });
  return new StreamableHTTPClientTransport(new URL('/mcp', base), {
    requestInit: { headers },
    fetch: kind === 'streamable-sse' ? preferSse : undefined,
  });
}

async function session(kind) {
  const client = new Client({ name: 'searchgate-sdk-test', version: '1.0.0' });
  const transport = transportFor(kind);
  await client.connect(transport);
  const out = {
    kind,
    server: client.getServerVersion(),
    protocolVersion: transport.protocolVersion ?? transport._protocolVersion ?? null,
    sessionId: transport.sessionId ?? null,
  };
  out.tools = (await client.listTools()).tools.map((t) => t.name);
  out.results = [];
  for (const c of CALLS) out.results.push(await client.callTool(c));
  await client.ping();
  try {
    await client.callTool({ name: 'no_such_tool', arguments: {} });
    out.unknownTool = 'no error';
  } catch (e) {
    out.unknownTool = e.code;
  }
  if (kind !== 'sse') await transport.terminateSession();
  await client.close();
  return out;
}

// verl's MCP client opens a fresh session around every call
async function freshSessions(n) {
  const texts = [];
  for (let i = 0; i < n; ++i) {
    const client = new Client({ name: 'verl-like', version: '1.0.0' });
    const transport = transportFor('streamable');
    await client.connect(transport);
    const r = await client.callTool({ name: 'search', arguments: { query: 'faiss' } });
    texts.push(r.content[0].text);
    await transport.terminateSession();
    await client.close();
  }
  return texts;
}

const report = {};
for (const kind of ['streamable', 'streamable-sse', 'sse']) report[kind] = await session(kind);
report.fresh = await freshSessions(3);
process.stdout.write(JSON.stringify(report));
