// The petstore command (package.json "bin") runs dist/main.js as a file, through its first line.
// npm ci links the command before a fresh clone's first build has made that file, so npm cannot
// have made it executable: the build does.
import { chmodSync } from 'node:fs';
import { URL } from 'node:url';

chmodSync(new URL('../dist/main.js', import.meta.url), 0o755);
