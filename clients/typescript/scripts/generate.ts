import { writeFileSync } from 'node:fs';
import { generateSchema, SCHEMA_PATH } from './schema.js';

// `npm run generate -- http://127.0.0.1:8080/v1/openapi.json` (that URL is the default): the
// document as a running service serves it, never a copy.
const url = process.argv[2] ?? 'http://127.0.0.1:8080/v1/openapi.json';
const response = await fetch(url);
if (!response.ok) throw new Error(`GET ${url} answered ${response.status}`);
writeFileSync(SCHEMA_PATH, await generateSchema(await response.json()));
process.stderr.write(`Wrote ${SCHEMA_PATH.pathname} from ${url}.\n`);
