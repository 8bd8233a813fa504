import type { EventRecord } from '../store/store.js';
import { formatEventId } from './ids.js';

/**
 * An event as JSON, exactly as the feed lists it (GET /v1/events): `data` is the stored text of
 * the 201 body put in as it is, so every int64 digit survives. test/webhooks-delivery.test.ts
 * holds a delivered body to the feed's byte for byte.
 */
export const eventJson = (event: EventRecord): string =>
  `{"id":"${formatEventId(event.position)}","type":"${event.type}","createdAt":"${event.createdAt.toISOString()}","data":${event.data}}`;
