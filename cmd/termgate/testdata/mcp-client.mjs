// Drives `termgate mcp` over stdio with the TypeScript MCP SDK, as an
// agent written in TypeScript would: list the tools, run a command to its
// exit, start one that keeps running, read its output, cancel it and read
// its end. Prints what it saw as one JSON object.
//
// node mcp-client.mjs SDK_DIR COMMAND [ARGS...]
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [sdk, command, ...args] = process.argv.slice(2);
const load = (p) => import(pathToFileURL(join(sdk, 'dist/esm', p)).href);
const { Client } = await load('client/index.js');
const { StdioClientTransport } = await load('client/stdio.js');

const client = new Client({ name: 'termgate-ts-test', version: '1' });
await client.connect(new StdioClientTransport({ command, args, env: process.env, stderr: 'inherit' }));
const text = (r) => r.content.filter((c) => c.type === 'text').map((c) => c.text).join('');
const seen = {};
seen.tools = (await client.listTools()).tools.map((t) => t.name).sort();
seen.exec = text(await client.callTool({ name: 'exec', arguments: { command: 'echo from typescript; exit 2' } }));
let r = await client.callTool({ name: 'exec', arguments: { command: 'echo started; sleep 100', yield_ms: 500 } });
const id = r.structuredContent.id;
seen.running = r.structuredContent.running;
seen.first = r.structuredContent.output;
await client.callTool({ name: 'cancel', arguments: { id } });
r = await client.callTool({ name: 'read_output', arguments: { id, yield_ms: 20000 } });
seen.end = r.structuredContent.exit;
r = await client.callTool({ name: 'read_output', arguments: { id: 'nothing-here' } });
seen.error = { isError: r.isError, text: text(r) };
await client.close();
console.log(JSON.stringify(seen));
