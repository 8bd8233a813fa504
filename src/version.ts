import { readFileSync } from 'node:fs';

/**
 * The service's own version, from package.json (one level above `src/` and `dist/`): what
 * `petstore --version` and the start line report. The OpenAPI document's `info.version` is the
 * interface's version instead (docs/api.md#versions-and-base-address: 1.0.0), which changes only with the interface.
 */
export const version = (
  JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }
).version;
