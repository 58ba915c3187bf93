// Runs OpenAI's Node SDK (the npm package openai) against an OpenAI-compatible base URL, argv[2],
// and prints one JSON object of what it did:
//   calls:    for each chat completion call, the HTTP responses the SDK received (status,
//             retry-after-ms, retry-after), ending with the one it returned;
//   sleeps:   every wait the SDK made between attempts, in ms;
//   error:    the error a client without retries (maxRetries: 0) gets from a denial, as the SDK
//             models it: its class, status, code and type.
// Run with NODE_PATH set to the package's node_modules.
const OpenAI = require('openai');

const requestTimeout = 30000;
// The SDK waits between attempts with its internal sleep(ms), which it calls through its module
// object: record each wait there (the package does not export the module; its file is reached
// by its path).
const path = require('path');
const sleepModule = require(path.join(path.dirname(require.resolve('openai')), 'internal', 'utils', 'sleep.js'));
const realSleep = sleepModule.sleep;
const sleeps = [];
sleepModule.sleep = (ms) => {
  sleeps.push(ms);
  return realSleep(ms);
};

let current = [];
const recording = async (url, init) => {
  const resp = await fetch(url, init);
  current.push({
    status: resp.status,
    retryAfterMs: resp.headers.get('retry-after-ms'),
    retryAfter: resp.headers.get('retry-after'),
  });
  return resp;
};

const body = { model: 'm', messages: [{ role: 'user', content: 'hi' }] };

(async () => {
  const baseURL = process.argv[2];
  const client = new OpenAI({ apiKey: 'test', baseURL, maxRetries: 2, timeout: requestTimeout, fetch: recording });
  const calls = [];
  for (let i = 0; i < 3; i++) {
    current = [];
    await client.chat.completions.create(body);
    calls.push(current);
  }
  const noRetry = new OpenAI({ apiKey: 'test', baseURL, maxRetries: 0, timeout: requestTimeout });
  let error = null;
  for (let i = 0; i < 5 && !error; i++) {
    try {
      await noRetry.chat.completions.create(body);
    } catch (e) {
      error = { class: e.constructor.name, rateLimit: e instanceof OpenAI.RateLimitError, status: e.status, code: e.code, type: e.type };
    }
  }
  process.stdout.write(JSON.stringify({ calls, sleeps, error }));
})().catch((e) => {
  process.stderr.write(String(e && e.stack ? e.stack : e));
  process.exit(1);
});
