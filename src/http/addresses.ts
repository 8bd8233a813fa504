import { BlockList, isIP } from 'node:net';
import type { FastifyRequest } from 'fastify';

/** The addresses and ranges of `entries` (PETSTORE_TRUST_PROXY's form: 10.0.0.0/8, 2001:db8::1). */
export function blockListOf(entries: string[]): BlockList {
  const list = new BlockList();
  for (const entry of entries) {
    const [address = '', prefix] = entry.split('/');
    const type = isIP(address) === 6 ? 'ipv6' : 'ipv4';
    if (prefix === undefined) list.addAddress(address, type);
    else list.addSubnet(address, Number(prefix), type);
  }
  return list;
}

/** The eight 16-bit groups of an IPv6 address (without a zone), a dotted IPv4 tail included. */
function groupsOf(address: string): number[] {
  const [head = '', tail] = address.split('::');
  const parse = (part: string) =>
    part === ''
      ? []
      : part.split(':').flatMap((group) => {
          if (!group.includes('.')) return [parseInt(group, 16)];
          const [a = 0, b = 0, c = 0, d = 0] = group.split('.').map(Number);
          return [(a << 8) | b, (c << 8) | d];
        });
  const first = parse(head);
  const last = tail === undefined ? [] : parse(tail);
  return [...first, ...Array<number>(8 - first.length - last.length).fill(0), ...last];
}

/**
 * The group a client address is counted in by every per-address limit (the connection cap
 * and the refused-key limit): an IPv4 address is its own group, an IPv4-mapped IPv6 address
 * (`::ffff:192.0.2.1`, how a dual-stack socket shows an IPv4 peer) is that IPv4 address, and an
 * IPv6 address counts by its /64, the smallest block a site or a single host is given (RFC 6177,
 * RFC 8273): whoever holds one address of a /64 can use all of them. Anything else (not an IP
 * address) is returned unchanged.
 *
 * @example addressGroup('2001:db8:1:2:aaaa::1') // '2001:db8:1:2::/64'
 * @example addressGroup('2001:db8::1') // '2001:db8::/64'
 * @example addressGroup('::ffff:192.0.2.1') // '192.0.2.1'
 */
export function addressGroup(address: string): string {
  const bare = address.split('%', 1)[0]!;
  const version = isIP(bare);
  if (version === 4) return bare;
  if (version !== 6) return address;
  const groups = groupsOf(bare.toLowerCase());
  if (groups.slice(0, 5).every((group) => group === 0) && groups[5] === 0xffff) {
    const [high = 0, low = 0] = groups.slice(6);
    return `${high >> 8}.${high & 0xff}.${low >> 8}.${low & 0xff}`;
  }
  // RFC 5952's form: the zeros that end the prefix join the /64's own in one `::`.
  const prefix = groups.slice(0, 4);
  while (prefix.at(-1) === 0) prefix.pop();
  return `${prefix.map((group) => group.toString(16)).join(':')}::/64`;
}

/**
 * The address a request came from, for the per-address limit: the client a trusted proxy
 * names in X-Forwarded-For when that is an IP address, else the peer's own address. A value
 * that is not an address is never used (nor echoed in a message).
 */
export function clientAddress(request: FastifyRequest): string {
  // A zone (fe80::1%eth0) names nothing beyond the proxy's own host, and may be any length.
  if (isIP(request.ip) !== 0 && !request.ip.includes('%')) return request.ip;
  return request.raw.socket.remoteAddress ?? 'an unknown address';
}
