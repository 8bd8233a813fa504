import http from 'node:http';
import https from 'node:https';

export interface Agents {
  http: http.Agent;
  https: https.Agent;
}

/**
 * Keep-alive connections per endpoint (docs/webhooks.md#pace): each endpoint has agents of its
 * own, so attempts to one receiver reuse its connections, and an endpoint whose connections hang
 * never holds a socket another endpoint on the same host would wait for. An endpoint's agents
 * are made anew when its URL's origin changes, and dropped with it.
 */
export function endpointAgents({ maxSockets, timeoutMs }: { maxSockets: number; timeoutMs: number }) {
  const byEndpoint = new Map<number, { origin: string; agents: Agents }>();
  const destroy = ({ agents }: { agents: Agents }) => {
    agents.http.destroy();
    agents.https.destroy();
  };
  return {
    /** The agents of endpoint `id` at `url`. */
    of(id: number, url: string): Agents {
      const origin = new URL(url).origin;
      const known = byEndpoint.get(id);
      if (known?.origin === origin) return known.agents;
      if (known) destroy(known);
      const options = { keepAlive: true, maxSockets, timeout: timeoutMs };
      const agents = { http: new http.Agent(options), https: new https.Agent(options) };
      byEndpoint.set(id, { origin, agents });
      return agents;
    },
    /** Drops the agents of every endpoint but those in `ids`. */
    keep(ids: ReadonlySet<number>): void {
      for (const [id, known] of byEndpoint) {
        if (ids.has(id)) continue;
        destroy(known);
        byEndpoint.delete(id);
      }
    },
    destroy(): void {
      byEndpoint.forEach(destroy);
      byEndpoint.clear();
    },
  };
}
