// Measures @termgate/client under Node: the rate at which it reads a
// command's terminal output, and the memory an idle attached session
// costs. node --expose-gc clients-bench.mjs CLIENT_INDEX_JS URL TOKEN CMD IDLE
import { pathToFileURL } from 'node:url';

const [index, url, token, cmd, idle] = process.argv.slice(2);
const { TermgateClient } = await import(pathToFileURL(index).href);
const client = new TermgateClient({ url: url.replace(/^http/, 'ws') + '/v1/connect', getToken: () => token });

const t0 = process.hrtime.bigint();
let bytes = 0;
await new Promise((resolve) => {
  const ex = client.start({ command: '/bin/sh', args: ['-c', cmd], pty: { rows: 24, cols: 80 } });
  ex.on('output', (b) => { bytes += b.length; });
  ex.on('exit', resolve);
});
const ms = Number(process.hrtime.bigint() - t0) / 1e6;

// The JS heap and what it holds outside it (buffers): RSS moves with
// the collector by more than a session costs.
const used = () => { globalThis.gc?.(); globalThis.gc?.(); const m = process.memoryUsage(); return m.heapUsed + m.external; };
const before = used();
const n = Number(idle);
const attached = [];
for (let i = 0; i < n; i++) {
  attached.push(new Promise((resolve) => {
    const ex = client.start({ command: '/bin/sh', args: ['-c', 'sleep 120'], pty: { rows: 24, cols: 80 } });
    ex.on('attached', () => resolve(ex));
  }));
}
const exs = await Promise.all(attached);
await new Promise((resolve) => setTimeout(resolve, 500));
const after = used();
for (const ex of exs) ex.cancel();
client.close();
console.log(JSON.stringify({ bytes, ms, idleKiB: (after - before) / 1024 / n }));
