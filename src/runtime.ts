// better-sqlite3 13 is built for Node.js 22 and later: loaded by Node.js 20 it crashes the
// process. main.ts imports this module first, before anything loads better-sqlite3, so an
// unsupported Node.js gets one sentence and exit status 2 instead of a native crash.

/** The oldest Node.js major the service runs on. */
export const OLDEST_NODE = 22;

/**
 * Why this Node.js cannot run the service, or undefined when it can.
 *
 * @example unsupportedRuntime('20.20.2') // 'Node.js 20.20.2 cannot run petstore, which needs Node.js 22 or later; …'
 */
export function unsupportedRuntime(version: string): string | undefined {
  const major = Number(/^v?(\d+)\./.exec(version)?.[1]);
  if (major >= OLDEST_NODE) return undefined;
  return (
    `Node.js ${version} cannot run petstore, which needs Node.js ${OLDEST_NODE} or later; ` +
    `npm start and npm run petstore run node_modules/.bin/node, which npm ci installs on Linux (x64, arm64) ` +
    `and Windows (x64), and elsewhere the node on the PATH.`
  );
}

const problem = unsupportedRuntime(process.versions.node);
if (problem) {
  process.stderr.write(`petstore: ${problem}\n`);
  process.exit(2);
}
