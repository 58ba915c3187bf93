// Reads one JSON array of header objects (lower-case names) on stdin, parses each with the npm
// package ratelimit-header-parser as its users do (parseRateLimit(headers), the reset format
// detected), and prints one JSON array: for each, limit, remaining and reset (ms since the Unix
// epoch), with now, the instant it parsed at (a reset in seconds counts from it); null when the
// parser found no rate-limit headers. Run with NODE_PATH set to the package's node_modules.
const { parseRateLimit } = require('ratelimit-header-parser');

let input = '';
process.stdin.on('data', (d) => { input += d; });
process.stdin.on('end', () => {
  const out = JSON.parse(input).map((headers) => {
    const now = Date.now();
    const r = parseRateLimit(new Headers(headers));
    if (!r) return null;
    return { limit: r.limit, remaining: r.remaining, reset: r.reset ? r.reset.getTime() : null, now };
  });
  process.stdout.write(JSON.stringify(out));
});
