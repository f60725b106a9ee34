// build.mjs bundles the browser terminal into dist/ (app.js, app.css and
// index.html), which the Go package embeds, each with its gzip-compressed
// copy (NAME.gz): the server then compresses nothing as it starts. Run with
// `npm run build`.
import { build } from 'esbuild';
import { copyFile, mkdir, readFile, writeFile } from 'node:fs/promises';
import { constants, gzipSync } from 'node:zlib';

const here = new URL('.', import.meta.url);
const out = new URL('dist/', here);

await mkdir(out, { recursive: true });
await build({
  absWorkingDir: here.pathname,
  entryPoints: { app: 'src/main.js' },
  bundle: true,
  format: 'esm',
  minify: true,
  target: 'es2020',
  outdir: 'dist',
  legalComments: 'eof',
  logLevel: 'info',
});
await copyFile(new URL('src/index.html', here), new URL('index.html', out));
for (const name of ['app.js', 'app.css', 'index.html']) {
  const file = new URL(name, out);
  const gz = gzipSync(await readFile(file), { level: constants.Z_BEST_COMPRESSION });
  await writeFile(new URL(name + '.gz', out), gz);
}
