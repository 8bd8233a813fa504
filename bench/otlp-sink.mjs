// An OTLP/HTTP collector for the benchmark's tracing row: it reads each export and discards it,
// answering as a collector does, so the service pays for sending its spans and nothing else.
import { createServer } from 'node:http';
import process from 'node:process';

const server = createServer((request, response) => {
  request.resume();
  request.on('end', () => response.writeHead(200, { 'content-type': 'application/json' }).end('{}'));
});
server.keepAliveTimeout = 60_000;
server.listen(Number(process.env.PORT), '127.0.0.1');
process.on('SIGTERM', () => server.close(() => process.exit(0)));
