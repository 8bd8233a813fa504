// A webhook receiver for the benchmark's events rows: it answers every delivery 204 at once and
// records when it arrived (`Date.now()`, the clock the bench reads its 201s with), its
// `webhook-id`, the pet's id from the event's data and the status it answered. GET /deliveries
// returns the records as JSON lines; GET /count how many there are. GET /down makes it answer
// every delivery 503 from then on (an outage), GET /up 204 again. Signatures are not checked:
// that is the tests' work (docs/webhooks.md#signatures), and the rows measure the service, not a
// receiver.
// With RECEIVER=hang it answers no delivery (each is counted, then held open until the service
// gives up on it): a receiver that hangs, for the backlog and hanging-endpoint measures.
import { Buffer } from 'node:buffer';
import { createServer } from 'node:http';
import process from 'node:process';

const records = [];
const hang = process.env.RECEIVER === 'hang';
let down = false;

const server = createServer((request, response) => {
  if (request.method === 'GET') {
    if (request.url === '/down' || request.url === '/up') down = request.url === '/down';
    const body = request.url === '/count' ? String(records.length) : records.map((r) => JSON.stringify(r)).join('\n');
    response.writeHead(200, { 'content-type': 'text/plain' }).end(body);
    return;
  }
  const chunks = [];
  request.on('data', (chunk) => chunks.push(chunk));
  request.on('end', () => {
    const at = Date.now();
    const status = down ? 503 : 204;
    if (!hang) response.writeHead(status).end();
    // The pet's id as its digits: an int64 past 2^53 stays exact.
    const pet = /"data":\{"id":([0-9]+)/.exec(Buffer.concat(chunks).toString('utf8'))?.[1] ?? null;
    records.push({ at, id: request.headers['webhook-id'] ?? null, pet, status: hang ? null : status });
  });
});
server.keepAliveTimeout = 60_000;
server.listen(Number(process.env.PORT), '127.0.0.1');
process.on('SIGTERM', () => {
  server.close(() => process.exit(0));
  // Held deliveries would keep it open.
  server.closeAllConnections();
});
