import { once } from 'node:events';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';

/** A TCP proxy on 127.0.0.1 in front of the test PostgreSQL, that a test can stop, restart or silence. */
export class PostgresProxy {
  port = 0;
  /** Accepts and reads, but forwards nothing either way: a server gone silent. */
  silent = false;
  /** Local ports of the connections to PostgreSQL, as pg_stat_activity.client_port shows them. */
  readonly upstreamPorts = new Set<number>();
  /** The parameters each connection's startup message asked for (user, database, options…), in order. */
  readonly startups: Record<string, string>[] = [];
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();

  constructor(
    private readonly host: string,
    private readonly targetPort: number,
  ) {}

  async start(): Promise<void> {
    const server = createServer((client) => this.forward(client));
    server.listen(this.port, '127.0.0.1');
    await once(server, 'listening');
    this.port = (server.address() as AddressInfo).port;
    this.server = server;
  }

  /** Closes the port and drops every connection: connection refused from now on. */
  async stop(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    for (const socket of this.sockets) socket.destroy();
    this.sockets.clear();
    this.upstreamPorts.clear();
    if (server) await new Promise((resolve) => server.close(resolve));
  }

  private forward(client: Socket) {
    const upstream = connect(this.targetPort, this.host);
    for (const socket of [client, upstream]) {
      this.sockets.add(socket);
      socket.on('error', () => {});
      socket.on('close', () => {
        client.destroy();
        upstream.destroy();
        this.sockets.delete(socket);
      });
    }
    upstream.on('connect', () => this.upstreamPorts.add(upstream.localPort!));
    client.once('data', (chunk) => void this.startups.push(startupParameters(chunk)));
    client.on('data', (chunk) => void (this.silent || upstream.write(chunk)));
    upstream.on('data', (chunk) => void (this.silent || client.write(chunk)));
  }
}

/** A startup message's parameters: Int32 length, Int32 protocol version, then name\0value\0 pairs. */
function startupParameters(message: Buffer): Record<string, string> {
  const fields = message.subarray(8, message.readInt32BE(0)).toString('utf8').split('\0');
  const parameters: Record<string, string> = {};
  for (let i = 0; i + 1 < fields.length && fields[i] !== ''; i += 2) parameters[fields[i]!] = fields[i + 1]!;
  return parameters;
}
