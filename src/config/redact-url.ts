// A URL of the config as a log line, an answer, a status event or a command's output may show it.
// A URL can carry a credential in three places: its userinfo (`redis://:password@host`, the common
// form), its query (`?api-key=…`, `?token=…`) and, more rarely, its fragment. Each is replaced
// whole by "[redacted]" (a query's parameter names too: a bare `?sk-…` is a name); what is left,
// the scheme, host, port and path, says where the URL points and that something was withheld.

export const REDACTED = '[redacted]';

/**
 * The parts of a URL by their delimiters alone, as RFC 3986 splits them, so that a text the URL
 * parser refuses (the schema lets some Redis URLs through that it does not read) is split too. The
 * authority found here holds the parser's (which also ends at a "\"), so a userinfo the parser
 * would find is always inside what is withheld.
 */
const PARTS = /^([A-Za-z][A-Za-z0-9+.-]*:\/\/)?([^/?#]*)([^?#]*)(\?[^#]*)?(#[\s\S]*)?$/;

/** `url` with its userinfo, query and fragment each replaced by "[redacted]"; one that has none is returned as it is. */
export function redactUrl(url: string): string {
  const [, scheme = '', authority = '', path = '', query, fragment] = PARTS.exec(url)!;
  const at = authority.lastIndexOf('@');
  if (at === -1 && query === undefined && fragment === undefined) return url;
  const host = at === -1 ? authority : `${REDACTED}@${authority.slice(at + 1)}`;
  return `${scheme}${host}${path}${query === undefined ? '' : `?${REDACTED}`}${fragment === undefined ? '' : `#${REDACTED}`}`;
}

/**
 * Every URL written in `text` (an error message that quotes one), redacted; the rest of the text
 * as it is. Punctuation that ends a URL's run (`(http://…).`) is taken as the sentence's.
 */
export function redactUrlsIn(text: string): string {
  if (!text.includes('://')) return text;
  return text.replace(/[A-Za-z][A-Za-z0-9+.-]*:\/\/[^\s"'<>`]+/g, (url) => {
    const end = url.length - (/[).,;:]+$/.exec(url)?.[0].length ?? 0);
    return redactUrl(url.slice(0, end)) + url.slice(end);
  });
}
