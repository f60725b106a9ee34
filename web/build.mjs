// build.mjs bundles the browser terminal into dist/ (app.js, app.css and
// index.html), which the Go package embeds. Run with `npm run build`.
import { build } from 'esbuild';
import { copyFile, mkdir } from 'node:fs/promises';

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
