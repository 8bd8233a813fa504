import { setFlagsFromString } from 'node:v8';

// Under load V8 doubles its young generation step by step up to 3 × 16 MB, which alone takes
// peak RSS past 100 MB; kept at its starting size, the benchmark shows the same throughput
// and a peak near 90 MB (bench/README.md). Imported first by main.ts, before anything
// allocates much. A semi-space size given on the command line or in NODE_OPTIONS wins.
const given = [...process.execArgv, process.env.NODE_OPTIONS ?? ''].some((flag) => flag.includes('semi-space'));
if (!given) setFlagsFromString('--semi-space-growth-factor=1');
