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

export interface ConnectionCaps {
  /** Most connections open at once (PETSTORE_MAX_CONNECTIONS). */
  max: number;
  /** Most open at once from one peer address (PETSTORE_MAX_CONNECTIONS_PER_ADDRESS); undefined: no such cap. */
  perAddress: number | undefined;
  /** Proxies (PETSTORE_TRUST_PROXY), which carry many clients: not capped per address. */
  trusted: string[];
}

/**
 * Caps the connections open at once, in all and per peer address, so that clients that open
 * connections and send nothing cannot keep the others out:
 *
 * - past the per-address cap, the address's oldest connection that has sent nothing yet is
 *   closed to make room; when every one of them has sent something, the new one is closed;
 * - when the last of `max` slots is taken, the oldest connection that has sent nothing yet is
 *   closed, so the next client finds a slot; past `max`, node:http closes a new connection
 *   as soon as it opens.
 *
 * A connection that sent its request is never closed here; one that sends nothing meets the
 * header timeout anyway. Only open connections are remembered.
 */
export function capConnections(server: Server, { max, perAddress, trusted }: ConnectionCaps): void {
  server.maxConnections = max;
  const proxies = blockListOf(trusted);
  const isProxy = (address: string) =>
    trusted.length > 0 && proxies.check(address, isIP(address) === 6 ? 'ipv6' : 'ipv4');
  // Open connections, oldest first, with their address's set when capped per address.
  const open = new Map<Socket, { address: string; mine: Set<Socket> | undefined }>();
  const byAddress = new Map<string, Set<Socket>>();
  const forget = (socket: Socket) => {
    const entry = open.get(socket);
    if (!entry) return;
    open.delete(socket);
    entry.mine?.delete(socket);
    if (entry.mine?.size === 0) byAddress.delete(entry.address);
  };
  // The oldest connection of `among` that has sent nothing yet, other than `spare`, is closed.
  const closeOldestSilent = (among: Iterable<Socket>, spare: Socket): boolean => {
    for (const socket of among) {
      if (socket !== spare && socket.bytesRead === 0) {
        forget(socket);
        socket.destroy();
        return true;
      }
    }
    return false;
  };
  server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress;
    if (address === undefined) return;
    let mine: Set<Socket> | undefined;
    if (perAddress !== undefined && !isProxy(address)) {
      mine = byAddress.get(address);
      if (!mine) byAddress.set(address, (mine = new Set()));
      if (mine.size >= perAddress && !closeOldestSilent(mine, socket)) return void socket.destroy();
      mine.add(socket);
      // Closing the last other one may have let go of the set.
      byAddress.set(address, mine);
    }
    open.set(socket, { address, mine });
    socket.once('close', () => forget(socket));
    if (open.size >= max) closeOldestSilent(open.keys(), socket);
  });
}
