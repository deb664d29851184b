// Bedrock's failures in Anthropic's words: an exception's name (the `x-amzn-errortype` header of an
// error answer, or a stream's `:exception-type`, in either case) or else its HTTP status, as the
// `error.type` of Anthropic's error shape.

const BY_EXCEPTION: Readonly<Record<string, string>> = {
  validationexception: 'invalid_request_error',
  accessdeniedexception: 'permission_error',
  unrecognizedclientexception: 'authentication_error',
  expiredtokenexception: 'authentication_error',
  invalidsignatureexception: 'authentication_error',
  resourcenotfoundexception: 'not_found_error',
  throttlingexception: 'rate_limit_error',
  servicequotaexceededexception: 'rate_limit_error',
  serviceunavailableexception: 'overloaded_error',
  modelnotreadyexception: 'overloaded_error',
  modeltimeoutexception: 'api_error',
  modelerrorexception: 'api_error',
  modelstreamerrorexception: 'api_error',
  internalserverexception: 'api_error',
};

const BY_STATUS: Readonly<Record<number, string>> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  403: 'permission_error',
  404: 'not_found_error',
  413: 'request_too_large',
  429: 'rate_limit_error',
  503: 'overloaded_error',
  529: 'overloaded_error',
};

/** Anthropic's error type for Bedrock's exception `name` (any case), else for `status`. */
export function anthropicErrorType(status: number, name: string): string {
  return BY_EXCEPTION[name.toLowerCase()] ?? BY_STATUS[status] ?? (status >= 400 && status < 500 ? 'invalid_request_error' : 'api_error');
}
