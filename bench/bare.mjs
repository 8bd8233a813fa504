// Plain JavaScript so it runs on bare node, without the TypeScript loader.
// The ceiling: node:http with nothing behind it. Answers every GET with BODY_FILE's bytes (a
// page of animals the real service served) and every POST with a 201 and a fixed animal.
import { Buffer } from 'node:buffer';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import process from 'node:process';

const body = readFileSync(process.env.BODY_FILE);
const created = Buffer.from('{"id":10001,"name":"Rex","categoryId":7,"status":"available"}');

const server = createServer((request, response) => {
  if (request.method === 'POST') {
    request.resume();
    request.on('end', () => {
      response.writeHead(201, { 'content-type': 'application/json; charset=utf-8', location: '/v1/pets/10001' });
      response.end(created);
    });
    return;
  }
  response.writeHead(200, { 'content-type': 'application/json; charset=utf-8' });
  response.end(body);
});
server.listen(Number(process.env.PORT), '127.0.0.1', () => process.stdout.write('listening\n'));
process.on('SIGTERM', () => server.close(() => process.exit(0)));
