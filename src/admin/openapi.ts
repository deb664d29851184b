// The admin API's OpenAPI 3 document. `ADMIN_ROUTES` is the list the router serves from, so the
// document and the routes cannot drift apart (a test checks both against the running program).
import { z } from 'zod';
import { modelSchema, namedKeySchema, providerSchema, teamSchema } from '../config/schema.ts';
import { RESOURCE_KINDS } from '../config/resources.ts';

export interface AdminRoute {
  method: 'GET' | 'POST';
  path: string;
  summary: string;
  /** Served without the admin token (probes, scrapers, and the status page's empty shell). */
  open?: boolean;
  /** The answer's media type, when not JSON. */
  type?: string;
  /** Turned off with `admin.status_page: false` (then 404, and left out of this document). */
  statusPage?: boolean;
  query?: { name: string; description: string }[];
}

export const ADMIN_ROUTES: readonly AdminRoute[] = [
  { method: 'GET', path: '/livez', summary: 'Liveness: 200 while the process runs, draining included.', open: true },
  {
    method: 'GET',
    path: '/readyz',
    summary: 'Readiness: 200 when serving; 503 while draining or with the health check failed.',
    open: true,
    query: [{ name: 'verbose', description: 'List the individual checks.' }],
  },
  { method: 'GET', path: '/metrics', summary: 'Prometheus metrics.', open: true, type: 'text/plain' },
  { method: 'GET', path: '/server_info', summary: 'State, version, in-flight requests, connections, drain progress, listeners, where the config comes from (with etcd: whether the gateway follows it, since when, the last error); each worker, with workers > 1.' },
  {
    method: 'POST',
    path: '/drain_listeners',
    summary: 'Drain the listeners. Without `graceful`, stop accepting now (existing connections continue; the process stays). Repeating a call is a 200 no-op; a call that asks for more (every listener, or exiting) widens the drain in progress.',
    query: [
      { name: 'graceful', description: 'Keep accepting for the drain time while connections are retired, then stop; readiness is 503 throughout. The process exits once drained unless `skip_exit`.' },
      { name: 'inboundonly', description: 'Only listeners with `direction: inbound`.' },
      { name: 'skip_exit', description: 'With `graceful`: the listeners stay open and the process stays when the drain time is over.' },
    ],
  },
  {
    method: 'POST',
    path: '/hot_restart',
    summary:
      'E7: start a hot restart (a new generation takes the listening sockets, then this one drains). 202 when asked (a restart in progress is not started twice; /server_info `hot_restart.last` tells the result); 409 when hot_restart is not enabled or this generation is draining.',
  },
  { method: 'POST', path: '/healthcheck/fail', summary: 'Fail readiness; every `default` listener retires its connections at once.' },
  { method: 'POST', path: '/healthcheck/ok', summary: 'Pass readiness again.' },
  { method: 'GET', path: '/openapi.json', summary: 'This document.' },
  {
    method: 'GET',
    path: '/usage',
    summary: 'The usage ledger\'s totals over a time range (requests, errors, tokens, cost), grouped by key, team, model, provider or user, by hour or day. 404 ledger_not_enabled without a `ledger` section.',
    query: [
      { name: 'from', description: 'Start (ISO 8601 or epoch ms), included. Default: 7 days ago.' },
      { name: 'to', description: 'End (ISO 8601 or epoch ms), excluded. Default: now.' },
      { name: 'group_by', description: 'A comma list of key, team, model, provider, user.' },
      { name: 'bucket', description: 'hour or day (UTC).' },
    ],
  },
  {
    method: 'GET',
    path: '/requests',
    summary: 'The request log, newest first, a page at a time (`next_cursor`).',
    query: [
      { name: 'from', description: 'Start (ISO 8601 or epoch ms). Default: 24 hours ago.' },
      { name: 'to', description: 'End. Default: now.' },
      { name: 'key', description: 'A key\'s name.' },
      { name: 'team', description: 'A team\'s name.' },
      { name: 'model', description: 'The model asked for.' },
      { name: 'provider', description: 'The provider that served.' },
      { name: 'user', description: 'The `user` the client named.' },
      { name: 'status', description: 'An HTTP status, or `error` for every status >= 400.' },
      { name: 'error', description: 'A stable error code.' },
      { name: 'tag', description: 'One tag of `x-sluice-tags`.' },
      { name: 'limit', description: 'Requests per page, 1 to 500 (default 50).' },
      { name: 'cursor', description: 'The `next_cursor` of the previous page.' },
    ],
  },
  { method: 'GET', path: '/requests/{id}', summary: 'One request of the ledger, whole: its attempts, tokens, cost, tags and key metadata, and its bodies when `ledger.bodies` kept them. 404 unknown_request when it is not (yet) in the store.' },
  { method: 'GET', path: '/budgets', summary: 'Every budget of a key or a team: the period, what is spent (from the limit store) and what is left.' },
  {
    method: 'GET',
    path: '/status',
    summary: 'The live status page (HTML, no data of its own: it reads /status/events with the admin token from the URL fragment, `/status#token=…`, or asks for it).',
    open: true,
    type: 'text/html',
    statusPage: true,
  },
  {
    method: 'GET',
    path: '/status/events',
    summary:
      'Server-sent events: `status` about every second (every half second during a drain) with in-flight requests, connections, requests per second, targets, workers, config source and last reload, and the drain with its timeline and the streams and sessions still open; then `exited` as the process exits, and the stream ends. Not in flight: no drain waits for it. At most 32 at once (429 beyond).',
    type: 'text/event-stream',
    statusPage: true,
  },
];

/** The resource routes (resources-api.ts), documented with their schemas (from the config schema, so they cannot drift either). */
function resourcePaths(): Record<string, object> {
  const error = (description: string) => ({ description, content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } });
  const json = (schema: object) => ({ content: { 'application/json': { schema } } });
  const kind = { name: 'kind', in: 'path', required: true, schema: { type: 'string', enum: [...RESOURCE_KINDS] } };
  const name = { name: 'name', in: 'path', required: true, description: 'The resource name, percent-encoded (a model name may hold "/" or "*").', schema: { type: 'string' } };
  const ifMatch = { name: 'If-Match', in: 'header', required: false, description: 'Write only if the resource is at this revision (its ETag).', schema: { type: 'string' } };
  const ifNoneMatch = { name: 'If-None-Match', in: 'header', required: false, description: '"*": create only, never replace.', schema: { type: 'string' } };
  const resource = { oneOf: [{ $ref: '#/components/schemas/Provider' }, { $ref: '#/components/schemas/Model' }, { $ref: '#/components/schemas/Team' }, { $ref: '#/components/schemas/Key' }] };
  const written = json({ type: 'object', properties: { item: { type: 'object' }, revision: { type: 'integer' }, applied: { type: 'boolean', description: 'This gateway serves it already.' } } });
  const writeErrors = {
    '400': error('Not valid alone or with the rest of the configuration (a model of a provider, a key of a team, that does not exist).'),
    '409': error('The revision changed meanwhile (revision_conflict), the resource is in use (resource_in_use: a provider by a model, a team by a key), or the source is a file (read_only_source).'),
    '503': error('etcd did not answer; nothing was written.'),
  };
  const newKey = json({ type: 'object', properties: { item: { $ref: '#/components/schemas/Key' }, key: { type: 'string', description: 'The new key, shown this once.' }, revision: { type: 'integer' } } });
  return {
    '/config/{kind}': {
      get: {
        summary: 'The resources of a kind applied here, secrets left out (a provider key shown only as a ${VAR} reference; client keys as digests).',
        parameters: [kind],
        responses: { '200': json({ type: 'object', properties: { kind: { type: 'string' }, source: { type: 'string', enum: ['etcd', 'file', 'embedded'] }, revision: { type: 'integer' }, items: { type: 'array', items: resource } } }) },
      },
    },
    '/config/{kind}/{name}': {
      get: { summary: 'One resource, with its revision (also its ETag).', parameters: [kind, name], responses: { '200': json({ type: 'object', properties: { item: resource, revision: { type: 'integer' } } }), '404': error('No such resource.') } },
      put: {
        summary: 'Create or replace a resource (etcd mode): validated, written as a compare-and-swap on its revision, answered once this gateway serves it. A client key is stored as its SHA-256 digest.',
        parameters: [kind, name, ifMatch, ifNoneMatch],
        requestBody: { required: true, ...json(resource) },
        responses: { '200': { description: 'Replaced.', ...written }, '201': { description: 'Created.', ...written }, ...writeErrors },
      },
      delete: { summary: 'Delete a resource (etcd mode).', parameters: [kind, name, ifMatch], responses: { '200': json({ type: 'object', properties: { deleted: { type: 'string' }, revision: { type: 'integer' } } }), '404': error('No such resource.'), ...writeErrors } },
    },
    '/config/keys': {
      post: {
        summary: 'Create a client key (etcd mode); the key is in the answer, once, and stored only as its digest.',
        requestBody: {
          required: true,
          ...json({
            type: 'object',
            required: ['name'],
            properties: {
              name: { type: 'string' },
              models: { type: 'array', items: { type: 'string' }, description: 'The models the key may call: names or "prefix*" patterns; absent: every model.' },
              expires_at: { type: 'string', description: 'ISO 8601: the key is refused from then.' },
              enabled: { type: 'boolean' },
              metadata: { type: 'object', additionalProperties: { type: 'string' } },
              team: { type: 'string', description: 'The team the key belongs to (a name of /config/teams): its limits and budgets count the key too.' },
            },
          }),
        },
        responses: { '201': { description: 'Created.', ...newKey }, ...writeErrors },
      },
    },
    '/config/keys/{name}/rotate': {
      post: { summary: 'Give a client key a new value (etcd mode), keeping its models, expiry, enabled flag and metadata; the old value stops working once applied.', parameters: [name, ifMatch], responses: { '200': { description: 'Rotated.', ...newKey }, '404': error('No such key.'), ...writeErrors } },
    },
  };
}

const componentSchema = (schema: z.ZodType): object => {
  const { $schema: _, ...rest } = z.toJSONSchema(schema, { io: 'input', target: 'openapi-3.0', unrepresentable: 'any' });
  return rest;
};

export function openApiDocument(version: string, routes: readonly AdminRoute[] = ADMIN_ROUTES): object {
  const paths: Record<string, object> = {};
  for (const route of routes) {
    paths[route.path] = {
      [route.method.toLowerCase()]: {
        summary: route.summary,
        ...(route.open ? { security: [] } : {}),
        parameters: (route.query ?? []).map((q) => ({ name: q.name, in: 'query', required: false, description: q.description, allowEmptyValue: true, schema: { type: 'boolean' } })),
        responses: {
          '200': { description: 'OK', content: { [route.type ?? 'application/json']: {} } },
          ...(route.open ? {} : { '401': { description: 'Missing or wrong admin token (when `admin.token` is set).', content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } } }),
          ...(route.path === '/readyz' ? { '503': { description: 'Not ready (draining, or health check failed).' } } : {}),
          ...(route.path === '/status/events' ? { '429': { description: 'Too many watchers at once.', content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } } } : {}),
        },
      },
    };
  }
  Object.assign(paths, resourcePaths());
  // The request guard (request-guard.ts) answers before any route.
  const errorOf = (description: string) => ({ description, content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } });
  for (const operations of Object.values(paths) as Record<string, { responses: Record<string, object> }>[]) {
    for (const [method, operation] of Object.entries(operations)) {
      operation.responses['421'] = errorOf('host_not_allowed: the Host names neither loopback, this listener\'s address nor admin.allowed_hosts.');
      operation.responses['403'] = errorOf('cross_origin_request: Origin or Sec-Fetch-Site says another origin.');
      if (method !== 'get') operation.responses['415'] = errorOf('unsupported_media_type: a body that is not application/json.');
    }
  }
  return {
    openapi: '3.0.3',
    info: { title: 'Sluice admin API', version },
    paths,
    components: {
      securitySchemes: { adminToken: { type: 'http', scheme: 'bearer', description: 'The `admin.token` from the config, when set.' } },
      schemas: {
        Provider: componentSchema(providerSchema),
        Model: componentSchema(modelSchema),
        Team: componentSchema(teamSchema),
        Key: componentSchema(namedKeySchema),
        Error: {
          type: 'object',
          properties: { error: { type: 'object', properties: { message: { type: 'string' }, type: { type: 'string' }, code: { type: 'string' } } } },
        },
      },
    },
    security: [{ adminToken: [] }],
  };
}
