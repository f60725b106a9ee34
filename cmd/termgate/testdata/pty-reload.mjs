// Drives @termgate/client/vscode as an extension would, with a stand-in for
// vscode.EventEmitter: a terminal starts a shell, prints a marker, then the
// window "reloads": its client goes away, and a new one reattaches by the
// execution's ID and must show the screen (the marker) again. Prints what
// it saw as JSON. Run from the scratch project where the package is
// installed: node pty-reload.mjs URL TOKEN
import { TermgateClient } from '@termgate/client';
import { createPseudoterminal } from '@termgate/client/vscode';

const [url, token] = process.argv.slice(2);
const standIn = () => {
  const fns = new Set();
  return { event: (fn) => { fns.add(fn); return { dispose: () => fns.delete(fn) }; }, fire: (v) => fns.forEach((fn) => fn(v)), dispose: () => fns.clear() };
};
const connect = () => new TermgateClient({ url: url.replace(/^http/, 'ws') + '/v1/connect', getToken: () => token });
const until = (cond, ms) => new Promise((resolve, reject) => {
  const t0 = Date.now();
  const tick = () => (cond() ? resolve() : Date.now() - t0 > ms ? reject(new Error('timed out')) : setTimeout(tick, 20));
  tick();
});

const seen = {};
let id = '';
let first = '';
let client = connect();
let pty = createPseudoterminal({ client, makeEmitter: standIn, start: { command: '/bin/bash' }, onExecution: (x) => { id = x; } });
pty.onDidWrite((s) => { first += s; });
pty.open({ columns: 80, rows: 24 });
await until(() => id !== '', 20000);
pty.handleInput('echo marker-$((40 + 2))\r');
await until(() => first.includes('marker-42'), 20000);
pty.close(); // the window reloads: detached, the shell keeps running
client.close();

let second = '';
const names = [];
client = connect();
pty = createPseudoterminal({ client, makeEmitter: standIn, id });
pty.onDidWrite((s) => { second += s; });
pty.onDidChangeName((n) => names.push(n));
const closed = new Promise((resolve) => pty.onDidClose(resolve));
pty.open({ columns: 80, rows: 24 });
await until(() => second.includes('marker-42'), 20000);
seen.screen = second.startsWith('\x1bc') ? 'snapshot' : 'replay';
pty.handleInput('printf "\\033]0;titled\\007"; exit 7\r');
seen.code = await closed;
seen.names = names;
client.close();
console.log(JSON.stringify(seen));
