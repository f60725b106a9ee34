// assets.d.ts: main.js imports stylesheets for their side effect only;
// esbuild bundles them into app.css. This lets the checker accept them.
declare module '*.css';
