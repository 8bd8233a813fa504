import assert from 'node:assert/strict';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { test, type TestContext } from 'node:test';
import { addressGroup } from '../src/http/addresses.js';
import { startApp, tempSqliteStore } from './helpers.js';

const BAD_KEY = `psk_${'A'.repeat(43)}`;

test('addressGroup: IPv4 alone, IPv4-mapped IPv6 as IPv4, IPv6 by its /64', () => {
  assert.equal(addressGroup('192.0.2.1'), '192.0.2.1');
  assert.equal(addressGroup('::ffff:192.0.2.1'), '192.0.2.1');
  assert.equal(addressGroup('::FFFF:c000:0201'), '192.0.2.1');
  for (const address of [
    '2001:db8:1:2::',
    '2001:db8:1:2::1',
    '2001:db8:1:2:aaaa::1',
    '2001:0DB8:0001:0002:ffff:ffff:ffff:ffff',
    '2001:db8:1:2:0:0:0:1',
    '2001:db8:1:2:1:2:192.0.2.1',
  ]) {
    assert.equal(addressGroup(address), '2001:db8:1:2::/64', address);
  }
  assert.equal(addressGroup('2001:db8:1:3::1'), '2001:db8:1:3::/64');
  assert.equal(addressGroup('2001:db8::1'), '2001:db8::/64');
  assert.equal(addressGroup('2001:0:0:1::5'), '2001:0:0:1::/64');
  assert.equal(addressGroup('::1'), '::/64');
  assert.equal(addressGroup('::'), '::/64');
  assert.equal(addressGroup('fe80::1%eth0'), 'fe80::/64');
  assert.equal(addressGroup('64:ff9b::192.0.2.1'), '64:ff9b::/64');
  assert.equal(addressGroup('not an address'), 'not an address');
});

test('refused keys are counted per /64 behind a trusted proxy, and an IPv4-mapped address as its IPv4 address', async (t) => {
  const app = await startApp(t, { env: { PETSTORE_AUTH_FAILURE_LIMIT: '2', PETSTORE_TRUST_PROXY: '10.0.0.0/8' } });
  const from = (client: string) =>
    app.app.inject({
      method: 'GET',
      url: '/v1/pets',
      remoteAddress: '10.1.2.3',
      headers: { authorization: `Bearer ${BAD_KEY}`, 'x-forwarded-for': client },
    });
  assert.equal((await from('2001:db8:1:2::a')).statusCode, 401);
  assert.equal((await from('2001:db8:1:2:ffff::b')).statusCode, 401);
  const third = await from('2001:db8:1:2::c');
  assert.equal(third.statusCode, 429);
  assert.match(
    JSON.parse(third.body).message as string,
    /from 2001:db8:1:2::c, counted with the rest of 2001:db8:1:2::\/64;/,
  );
  // The next /64 is another client.
  assert.equal((await from('2001:db8:1:3::a')).statusCode, 401);
  // A valid key from the same /64 is still served.
  const valid = await app.app.inject({
    method: 'GET',
    url: '/v1/pets',
    remoteAddress: '10.1.2.3',
    headers: { authorization: `Bearer ${app.key}`, 'x-forwarded-for': '2001:db8:1:2::d' },
  });
  assert.equal(valid.statusCode, 200);

  assert.equal((await from('::ffff:198.51.100.7')).statusCode, 401);
  assert.equal((await from('198.51.100.7')).statusCode, 401);
  const mapped = await from('::ffff:198.51.100.7');
  assert.equal(mapped.statusCode, 429);
  assert.match(JSON.parse(mapped.body).message as string, /from 198\.51\.100\.7;/);
});

/** Whether this machine can listen on `host`. */
async function canListen(host: string): Promise<boolean> {
  const server = createServer();
  return new Promise((resolve) => {
    server.once('error', () => resolve(false));
    server.listen(0, host, () => server.close(() => resolve(true)));
  });
}

/**
 * Opens connections to `host`:`port` that begin a request and never finish it; each resolves
 * after 300 ms with whether the server closed it by then. Call it before the app is built: its
 * sockets are destroyed after the test before the app closes, whose close would wait for them.
 */
function beginner(t: TestContext) {
  const sockets: Socket[] = [];
  t.after(() => sockets.forEach((socket) => socket.destroy()));
  return (host: string, port: number) => begin(sockets, host, port);
}

function begin(sockets: Socket[], host: string, port: number): Promise<{ socket: Socket; closed: boolean }> {
  return new Promise((resolve) => {
    const socket = connect({ port, host, allowHalfOpen: true });
    sockets.push(socket);
    socket.on('error', () => {});
    const state = { socket, closed: false };
    socket.once('close', () => (state.closed = true));
    socket.once('end', () => (state.closed = true));
    socket.once('connect', () => socket.write('GET /v1/pets HTTP/1.1\r\n'));
    setTimeout(() => resolve(state), 300);
  });
}

test('over IPv6 and dual-stack sockets, the per-address cap counts ::1 by its /64 and ::ffff:127.0.0.1 as 127.0.0.1', async (t) => {
  if (!(await canListen('::'))) return t.skip('no IPv6 on this machine');
  const begin = beginner(t);
  const app = await startApp(t, {
    env: { PETSTORE_MAX_CONNECTIONS_PER_ADDRESS: '2' },
    store: (await tempSqliteStore(t)).store,
  });
  await app.app.listen({ port: 0, host: '::' });
  const { port } = app.app.server.address() as AddressInfo;
  for (const host of ['::1', '127.0.0.1']) {
    const held = [await begin(host, port), await begin(host, port)];
    assert.deepEqual(
      held.map((connection) => connection.closed),
      [false, false],
      host,
    );
    const third = await begin(host, port);
    assert.equal(third.closed, true, `a third connection from ${host} is closed at once`);
  }
});
