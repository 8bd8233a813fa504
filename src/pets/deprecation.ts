import type { Config } from '../config.js';
import type { HeaderDocs } from '../schemas.js';

/**
 * The headers every getPet answer carries: RFC 9745 Deprecation, RFC 8594 Sunset and the
 * RFC 8288 successor link.
 */
export function deprecationHeaders(config: Config): Record<string, string> {
  return {
    deprecation: `@${config.deprecationSeconds}`,
    sunset: new Date(config.sunsetSeconds * 1000).toUTCString(),
    link: '</v1/pets>; rel="successor-version"',
  };
}

export const deprecationHeaderDocs = {
  Deprecation: {
    type: 'string',
    maxLength: 13,
    pattern: '^@(0|[1-9][0-9]*)$',
    description: 'RFC 9745: when getPet was deprecated, as @<unix seconds>.',
  },
  Sunset: {
    type: 'string',
    maxLength: 29,
    enum: ['Thu, 05 Dec 2030 00:00:00 GMT'],
    description: 'RFC 8594: Thu, 05 Dec 2030 00:00:00 GMT; from then on getPet answers 410.',
  },
  Link: {
    type: 'string',
    maxLength: 35,
    enum: ['</v1/pets>; rel="successor-version"'],
    description: 'RFC 8288: </v1/pets>; rel="successor-version".',
  },
} satisfies HeaderDocs;
