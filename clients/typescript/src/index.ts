export {
  PetstoreClient,
  type ClientOptions,
  type CreatePetOptions,
  type Event,
  type EventPage,
  type ListEventsQuery,
  type ListPetsQuery,
  type NewPet,
  type Pet,
  type PetPage,
  type PetStatus,
} from './client.js';
export { PetstoreError, type ErrorCode } from './errors.js';
export type { components, operations, paths } from './schema.js';
