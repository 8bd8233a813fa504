import { BlockList, isIP, type Server, type Socket } from 'node:net';

/** The addresses and ranges of `entries` (PETSTORE_TRUST_PROXY's form: 10.0.0.0/8, 2001:db8::1). */
function blockListOf(entries: string[]): BlockList {
  const list = new BlockList();
  for (const entry of entries) {
    const [address = '', prefix] = entry.split('/');
    const type = isIP(address) === 6 ? 'ipv6' : 'ipv4';
    if (prefix === undefined) list.addAddress(address, type);
    else list.addSubnet(address, Number(prefix), type);
  }
  return list;
}

/**
 * Caps the connections open at once from one client address at `max` (undefined: no cap): a
 * connection past it is closed as soon as it opens, as one past PETSTORE_MAX_CONNECTIONS is,
 * so one address cannot take every slot. Connections from `trusted` proxies are not capped:
 * they carry many clients. Only addresses with a connection open are remembered.
 */
export function capConnectionsPerAddress(server: Server, max: number | undefined, trusted: string[]): void {
  if (max === undefined) return;
  const proxies = blockListOf(trusted);
  const open = new Map<string, number>();
  server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress;
    if (address === undefined) return;
    if (trusted.length > 0 && proxies.check(address, isIP(address) === 6 ? 'ipv6' : 'ipv4')) return;
    const count = (open.get(address) ?? 0) + 1;
    if (count > max) return void socket.destroy();
    open.set(address, count);
    socket.once('close', () => {
      const left = open.get(address)! - 1;
      if (left === 0) open.delete(address);
      else open.set(address, left);
    });
  });
}
