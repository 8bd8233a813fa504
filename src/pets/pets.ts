import fp from 'fastify-plugin';
import type { Config } from '../config.js';
import { refuseOtherMethods } from '../http/methods.js';
import type { Store } from '../store/store.js';
import { PageCache } from './page-cache.js';
import { createPet, getPet, listPets } from './routes.js';

export interface PetsOptions {
  store: Store;
  config: Config;
  /** Counts a call of a deprecated operation (petstore_deprecated_requests_total). */
  countDeprecatedCall: (operation: 'getPet') => void;
  /** Notes that a key called a deprecated operation (KeyMemory.noteDeprecatedUse). */
  noteDeprecatedUse: (apiKeyId: number, now: number) => void;
}

/**
 * The three operations under `/v1`, each behind `app.authenticate` (the auth plugin), and 405
 * for the methods their paths do not serve. listPets keeps the pages it may send again only on
 * a store whose pages never change (Store.idsVisibleInOrder).
 */
export const pets = fp<PetsOptions>(
  async (app, { store, config, countDeprecatedCall, noteDeprecatedUse }) => {
    const pages = store.idsVisibleInOrder ? new PageCache() : undefined;
    const deps = { store, config, authenticate: app.authenticate, pages, countDeprecatedCall, noteDeprecatedUse };
    listPets(app, deps);
    createPet(app, deps);
    getPet(app, deps);
    refuseOtherMethods(app, '/v1/pets', ['GET', 'POST']);
    refuseOtherMethods(app, '/v1/pets/:petId', ['GET']);
  },
  { name: 'petstore-pets', dependencies: ['petstore-auth'] },
);
