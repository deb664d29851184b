// What the client gets when the last attempt failed: that failure's own HTTP answer (its error
// translated back when the target speaks another API), or the gateway's error for its class.
import type { IncomingHttpHeaders } from 'node:http';
import type { DispatchController } from '../providers/types.ts';
import type { FailureClass } from '../config/schema.ts';
import { errors, type GatewayError } from '../api/errors.ts';
import type { Prepared } from './attempt.ts';
import type { Downstream, ExchangeEnvironment } from './routed-request.ts';
import { translatedError } from './answer-translation.ts';

/** Sends the last failure's HTTP answer (`status`, `headers`, `body`) whole, with its length. */
export function sendFailureAnswer(
  downstream: Downstream,
  controller: DispatchController,
  prepared: Prepared,
  status: number,
  answer: { readonly headers?: IncomingHttpHeaders; readonly body?: Buffer },
  env: ExchangeEnvironment,
  requestId: string,
): void {
  const headers: IncomingHttpHeaders = { ...answer.headers };
  let body = answer.body ?? Buffer.alloc(0);
  if (prepared.translation) {
    try {
      body = translatedError(prepared.translation, status, body);
    } catch (error) {
      env.reportBug(error, requestId);
      return downstream.onResponseError(controller, errors.untranslatableAnswer(prepared.provider.name));
    }
    headers['content-type'] = 'application/json';
  }
  delete headers['content-length'];
  delete headers['transfer-encoding'];
  headers['content-length'] = String(body.length);
  if (prepared.dropped.length > 0) headers['sluice-dropped-params'] = prepared.dropped.join(', ');
  downstream.onResponseStart(controller, status, headers, '');
  downstream.onResponseData(controller, body);
  return downstream.onResponseEnd(controller, {});
}

/** The gateway's error for a failure that left no HTTP answer to return, by its class; `provider`: whom it names. */
export function failureError(kind: FailureClass, provider: string): GatewayError {
  return kind === 'first_token_timeout'
    ? errors.firstTokenTimeout(provider)
    : kind === 'timeout'
      ? errors.upstreamTimeout(provider)
      : kind === 'connect'
        ? errors.upstreamConnect(provider)
        : kind === 'reset'
          ? errors.upstreamReset(provider)
          : errors.upstreamFailed(provider);
}
