import { Buffer } from 'node:buffer';

// Memory settings of the service's process, measured with `npm run bench:compare`
// (bench/README.md). Imported first by main.ts, before anything allocates much. The V8 settings
// are on node's command line (package.json's start and petstore scripts; docs/configuration.md
// "The command line"), since V8 reads them when it sets up its heap.

// Node cuts small Buffers (every request body, among others) out of shared 8 KB slabs. The
// current slab lives while some hundred bodies are cut from it, long enough to be promoted to
// the old generation, where its 8 KB stay until a full collection; V8 waits for 64 MB of such
// memory before it forces one: under createPet load RSS grew with every slab. Unpooled, a small
// Buffer is freed with its request in the young generation.
Buffer.poolSize = 0;
