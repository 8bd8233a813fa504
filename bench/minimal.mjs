// Plain JavaScript so it runs on bare node, without the TypeScript loader.
// The reference row the service's SQLite targets are ratios to: Fastify with one route per
// operation the bench drives (the first page and the page after an id, getPet, createPet), a
// JSON schema each and one prepared statement each, the very SQL the service's SQLite store runs
// (src/store/sqlite.ts), on a copy of the seeded file (WAL, synchronous=FULL); nothing else: no
// key check, no rate limit, no request log, no metrics, no page cache, no X-Request-Id, no
// idempotency, one fsync per create. Nobody should run it; it is what the framework and the
// database cost before the service adds anything.
import Database from 'better-sqlite3';
import Fastify from 'fastify';
import { Buffer } from 'node:buffer';
import process from 'node:process';

const db = new Database(process.env.PETSTORE_DB);
db.pragma('journal_mode = WAL');
db.pragma('synchronous = FULL');
db.pragma('busy_timeout = 5000');
db.defaultSafeIntegers(true);
const columns = 'id, name, category_id AS categoryId, status';
const getPet = db.prepare(`SELECT ${columns} FROM pets WHERE id = ?`);
// `LIMIT +?`, as the service writes it (LIST_ALL in src/store/sqlite.ts): SQLite then compiles
// the statement once, where with `LIMIT ?` it would compile it again on every call.
const listPets = db.prepare(`SELECT ${columns} FROM pets WHERE id > ? ORDER BY id LIMIT +?`);
const insertPet = db.prepare('INSERT INTO pets (name, category_id, status) VALUES (?, ?, ?)');

const Pet = {
  type: 'object',
  properties: {
    id: { type: 'integer' },
    name: { type: 'string' },
    categoryId: { type: 'integer' },
    status: { type: 'string' },
  },
};

const app = Fastify({ logger: false });
app.get(
  '/v1/pets',
  {
    schema: {
      querystring: {
        type: 'object',
        properties: { limit: { type: 'integer', minimum: 1, maximum: 100 }, cursor: { type: 'string' } },
        additionalProperties: false,
      },
      response: { 200: { type: 'array', items: Pet } },
    },
  },
  // The cursor is the service's (src/pets/cursor.ts): base64url of `<status>:<last id>`; the
  // bench's pages carry no status, so the page after an id is `WHERE id > ?`, as in the service.
  async (request, reply) => {
    const { limit = 20, cursor } = request.query;
    const after = cursor === undefined ? 0n : BigInt(Buffer.from(cursor, 'base64url').toString().split(':')[1]);
    const pets = listPets.all(after, limit + 1);
    if (pets.length > limit) {
      pets.length = limit;
      const next = Buffer.from(`:${pets[limit - 1].id}`).toString('base64url');
      reply.header('link', `</v1/pets?limit=${limit}&cursor=${next}>; rel="next"`);
    }
    return pets;
  },
);
app.get(
  '/v1/pets/:petId',
  {
    schema: {
      params: { type: 'object', properties: { petId: { type: 'integer', minimum: 1 } } },
      response: { 200: Pet },
    },
  },
  async (request, reply) => {
    const pet = getPet.get(BigInt(request.params.petId));
    if (!pet) return reply.code(404).send({ code: 'not_found', message: 'No such animal.', status: 404 });
    return pet;
  },
);
app.post(
  '/v1/pets',
  {
    schema: {
      body: {
        type: 'object',
        required: ['name', 'categoryId'],
        properties: {
          name: { type: 'string', minLength: 1, maxLength: 100 },
          categoryId: { type: 'integer' },
          status: { type: 'string', enum: ['available', 'pending', 'sold'] },
        },
        additionalProperties: false,
      },
      response: { 201: Pet },
    },
  },
  async (request, reply) => {
    const { name, categoryId, status = 'available' } = request.body;
    const { lastInsertRowid } = insertPet.run(name, categoryId, status);
    return reply
      .code(201)
      .header('location', `/v1/pets/${lastInsertRowid}`)
      .send({ id: lastInsertRowid, name, categoryId, status });
  },
);
await app.listen({ host: '127.0.0.1', port: Number(process.env.PORT) });
process.stdout.write('listening\n');
process.on('SIGTERM', () => app.close().then(() => process.exit(0)));
