// Drives @termgate/client's TermgateClient against a real serve through a
// TCP proxy that cuts every connection on demand: output resumes with no
// byte lost or repeated, input written across a cut is applied once, a
// cancel ends the execution, a refused token stops the client. Prints
// what it saw as JSON. node js-resume.mjs CLIENT_INDEX_JS URL TOKEN
import net from 'node:net';
import { pathToFileURL } from 'node:url';

const [index, url, token] = process.argv.slice(2);
const { TermgateClient } = await import(pathToFileURL(index).href);
const target = new URL(url);

// The proxy: every connection through it is cut by cut().
const sockets = new Set();
const proxy = net.createServer((c) => {
  const up = net.connect(Number(target.port), target.hostname);
  sockets.add(c).add(up);
  c.pipe(up).pipe(c);
  const gone = () => { c.destroy(); up.destroy(); sockets.delete(c); sockets.delete(up); };
  c.on('error', gone).on('close', gone);
  up.on('error', gone).on('close', gone);
});
await new Promise((resolve) => proxy.listen(0, '127.0.0.1', resolve));
const cut = () => { for (const s of sockets) s.destroy(); };
const viaProxy = `ws://127.0.0.1:${proxy.address().port}/v1/connect`;
const client = new TermgateClient({ url: viaProxy, getToken: () => token, minDelay: 20, maxDelay: 300 });
const seen = { reconnects: 0 };
client.on('status', (s) => { if (s.state === 'reconnecting') seen.reconnects++; });

const run = (spec, onOutput) => new Promise((resolve) => {
  const ex = client.start(spec);
  const chunks = [];
  let n = 0;
  const gaps = [];
  ex.on('output', (bytes) => { chunks.push(Buffer.from(bytes)); n += bytes.length; onOutput?.(ex, n); });
  ex.on('gap', (g) => gaps.push(g));
  ex.on('exit', (x) => resolve({ out: Buffer.concat(chunks).toString(), gaps, exit: x, ex }));
  ex.on('error', (e) => { if (e.fatal) resolve({ out: '', gaps, exit: null, error: e }); });
});

// Output across two cuts.
let want = '';
for (let i = 1; i <= 200000; i++) want += `${i}\n`;
const marks = [want.length / 4, want.length / 2];
let r = await run({ command: '/bin/sh', args: ['-c', 'seq 1 200000; exit 5'] }, (_, n) => { if (marks.length && n >= marks[0]) { marks.shift(); cut(); } });
seen.output = { exact: r.out === want, bytes: r.out.length, want: want.length, gaps: r.gaps.length, code: r.exit?.code };

// Input across a cut: written once each.
const ex2 = client.start({ command: '/bin/sh', args: ['-c', 'cat'], interactive: true });
const got2 = [];
const done2 = new Promise((resolve) => ex2.on('exit', resolve));
ex2.on('output', (b) => got2.push(Buffer.from(b)));
ex2.write('one\n');
await new Promise((resolve) => setTimeout(resolve, 300));
cut();
ex2.write('two\n');
ex2.closeStdin();
await done2;
seen.input = Buffer.concat(got2).toString();

// A cancel.
const ex3 = client.start({ command: '/bin/sh', args: ['-c', 'sleep 100'] });
const done3 = new Promise((resolve) => ex3.on('exit', resolve));
await new Promise((resolve) => ex3.on('attached', resolve));
ex3.cancel();
seen.cancelled = (await done3).reason;
client.close();

// A refused token is told as the error unauthorized (a WebSocket cannot
// see the handshake's 401: the client asks the HTTP API).
const refused = new TermgateClient({ url: url.replace(/^http/, 'ws') + '/v1/connect', getToken: () => 'not-a-token', minDelay: 20, maxDelay: 100 });
refused.start({ command: '/bin/sh', args: ['-c', 'true'] });
seen.refused = await new Promise((resolve) => {
  refused.on('error', (e) => resolve(e.error));
  setTimeout(() => resolve('not told'), 10000);
});
refused.close();
proxy.close();
console.log(JSON.stringify(seen));
