import type { EventRecord } from '../store/store.js';
import { formatEventId } from './ids.js';

/**
 * An event as JSON, for the feed (GET /v1/events) and every webhook delivery alike: `data` is the
 * stored text of the 201 body put in as it is, with no parse and no second serializer that could
 * round an int64 or reorder a field.
 */
export const eventJson = (event: EventRecord): string =>
  `{"id":"${formatEventId(event.position)}","type":"${event.type}","createdAt":"${event.createdAt.toISOString()}","data":${event.data}}`;
