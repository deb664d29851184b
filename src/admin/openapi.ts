// The admin API's OpenAPI 3 document. `ADMIN_ROUTES` is the list the router serves from, so the
// document and the routes cannot drift apart (a test checks both against the running program).

export interface AdminRoute {
  method: 'GET' | 'POST';
  path: string;
  summary: string;
  /** Served without the admin token (probes and scrapers). */
  open?: boolean;
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
  { method: 'GET', path: '/metrics', summary: 'Prometheus metrics.', open: true },
  { method: 'GET', path: '/server_info', summary: 'State, version, in-flight requests, connections, drain progress, listeners; each worker, with workers > 1.' },
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
];

export function openApiDocument(version: string): object {
  const paths: Record<string, object> = {};
  for (const route of ADMIN_ROUTES) {
    paths[route.path] = {
      [route.method.toLowerCase()]: {
        summary: route.summary,
        ...(route.open ? { security: [] } : {}),
        parameters: (route.query ?? []).map((q) => ({ name: q.name, in: 'query', required: false, description: q.description, allowEmptyValue: true, schema: { type: 'boolean' } })),
        responses: {
          '200': { description: 'OK', content: { [route.path === '/metrics' ? 'text/plain' : 'application/json']: {} } },
          ...(route.open ? {} : { '401': { description: 'Missing or wrong admin token (when `admin.token` is set).', content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } } }),
          ...(route.path === '/readyz' ? { '503': { description: 'Not ready (draining, or health check failed).' } } : {}),
        },
      },
    };
  }
  return {
    openapi: '3.0.3',
    info: { title: 'Sluice admin API', version },
    paths,
    components: {
      securitySchemes: { adminToken: { type: 'http', scheme: 'bearer', description: 'The `admin.token` from the config, when set.' } },
      schemas: {
        Error: {
          type: 'object',
          properties: { error: { type: 'object', properties: { message: { type: 'string' }, type: { type: 'string' }, code: { type: 'string' } } } },
        },
      },
    },
    security: [{ adminToken: [] }],
  };
}
