// Bundles the example chat page (examples/web/chat.js, on the `ai` package) into
// examples/web/chat.bundle.js with esbuild, offline, from this folder's node_modules.
//   node build_example.mjs            (the browser test and .ci/run run it)
import { build } from 'esbuild';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

const here = path.dirname(fileURLToPath(import.meta.url));
const web = path.join(here, '..', '..', 'examples', 'web');
await build({
  entryPoints: [path.join(web, 'chat.js')],
  outfile: path.join(web, 'chat.bundle.js'),
  bundle: true,
  format: 'esm',
  target: 'es2022',
  minify: true,
  nodePaths: [path.join(here, 'node_modules')],
  logLevel: 'warning',
});
