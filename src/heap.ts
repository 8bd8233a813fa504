import { Buffer } from 'node:buffer';
import { setFlagsFromString } from 'node:v8';

// Memory settings of the service's process, measured with `npm run bench` (bench/README.md).
// Imported first by main.ts, before anything allocates much. V8's memory reducer is set up with
// the heap, before any of this runs: `--no-memory-reducer` is on node's command line instead
// (package.json's start and petstore scripts; docs/configuration.md "The command line").

// Under load V8 doubles its young generation step by step up to 3 × 16 MB, which alone takes
// peak RSS past 100 MB; kept at its starting size, the benchmark shows the same throughput
// and a peak near 90 MB. A semi-space size given on the command line or in NODE_OPTIONS wins.
const given = [...process.execArgv, process.env.NODE_OPTIONS ?? ''].some((flag) => flag.includes('semi-space'));
if (!given) setFlagsFromString('--semi-space-growth-factor=1');

// Node cuts small Buffers (every request body, among others) out of shared 8 KB slabs. The
// current slab lives while some hundred bodies are cut from it, long enough to be promoted to
// the old generation, where its 8 KB stay until a full collection; V8 waits for 64 MB of such
// memory before it forces one: under createPet load RSS grew with every slab. Unpooled, a small
// Buffer is freed with its request in the young generation.
Buffer.poolSize = 0;
