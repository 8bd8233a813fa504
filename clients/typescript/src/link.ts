// RFC 8288 section 3: `<target>; param=value; param="quoted"`, links separated by commas.
const LINK = /<([^>]*)>((?:\s*;\s*[^;,=\s]+\s*(?:=\s*(?:"(?:[^"\\]|\\.)*"|[^;,"\s]*))?)*)/g;
const PARAM = /;\s*([^;,=\s]+)\s*(?:=\s*("(?:[^"\\]|\\.)*"|[^;,"\s]*))?/g;

/** The target of the link with relation `rel` in a `Link` header, resolved against `base`. */
export function findLink(header: string | null, rel: string, base: string): URL | undefined {
  if (!header) return undefined;
  for (const [, target, params = ''] of header.matchAll(LINK)) {
    for (const [, name, raw = ''] of params.matchAll(PARAM)) {
      if (name!.toLowerCase() !== 'rel') continue;
      const value = raw.startsWith('"') ? raw.slice(1, -1).replace(/\\(.)/g, '$1') : raw;
      // rel may list several relation types, separated by spaces; they compare case-insensitively.
      if (value.toLowerCase().split(/\s+/).includes(rel)) return new URL(target!, base);
    }
  }
  return undefined;
}
