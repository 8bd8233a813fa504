import { StoreUnavailableError, wrapMethods, type Store } from './store.js';

// The methods that write: one succeeding shows the database can write again.
const WRITES = new Set([
  'migrate',
  'createPet',
  'createPetOnce',
  'createKey',
  'createFirstKey',
  'revokeKey',
  'rollKey',
]);

/** `error`, or an error it was caused by, that `matches` accepts. */
function causedBy(error: unknown, matches: (error: unknown) => boolean): boolean {
  for (let depth = 0; error instanceof Error && depth < 4; depth++, error = error.cause) {
    if (matches(error)) return true;
  }
  return false;
}

/**
 * `store` with every error `isDiskError` accepts (a full disk, an I/O error) as
 * StoreUnavailableError, so the client gets 503 `unavailable`, not 500. After one, `ping` rejects
 * (`/readyz` answers 503) until a write succeeds again: a request's, or the `probeWrite` that each
 * ping tries meanwhile, so an instance that no traffic reaches finds out too.
 */
export function watchDiskErrors(
  store: Store,
  isDiskError: (error: unknown) => boolean,
  probeWrite: () => Promise<void>,
): Store {
  let failure: StoreUnavailableError | undefined;
  const failed = (error: unknown) =>
    causedBy(error, isDiskError)
      ? (failure = error instanceof StoreUnavailableError ? error : new StoreUnavailableError(error))
      : error;
  return wrapMethods(store, (name, method) => {
    if (name === 'ping') {
      return async () => {
        if (failure) {
          try {
            await probeWrite();
            failure = undefined;
          } catch (error) {
            throw failed(error);
          }
        }
        return method();
      };
    }
    const write = WRITES.has(name);
    // No rest parameters: no array per call on the request path (no method takes more than 3).
    return (a, b, c) =>
      method(a, b, c).then(
        (result) => {
          if (write) failure = undefined;
          return result;
        },
        (error: unknown) => {
          throw failed(error);
        },
      );
  });
}
