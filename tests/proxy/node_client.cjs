// The official `openai` npm package against fsm-agent serve (PX-3, PX-5): one streamed request per
// mode given ("chat" or "responses"), one JSON line each on stdout: {ok, text} for an answer read to
// its end, {ok: false, text, error, name} for an error the SDK raised (a cut answer must be one).
// Usage: node node_client.cjs NODE_MODULES_DIR BASE_URL API_KEY MODEL MODE...
const [modules, baseURL, apiKey, model, ...modes] = process.argv.slice(2);
const sdk = require(require.resolve("openai", { paths: [modules] }));
const OpenAI = sdk.OpenAI ?? sdk.default ?? sdk;

async function one(client, mode) {
  let text = "";
  try {
    if (mode === "responses") {
      const stream = await client.responses.create({ model, input: "hi", stream: true });
      let completed = false;
      for await (const event of stream) {
        if (event.type === "response.output_text.delta") text += event.delta;
        if (event.type === "response.completed") completed = true;
      }
      if (!completed) throw new Error("the stream ended without response.completed");
    } else {
      const stream = await client.chat.completions.create({
        model,
        messages: [{ role: "user", content: "hi" }],
        stream: true,
      });
      for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? "";
    }
    return { ok: true, text };
  } catch (err) {
    return { ok: false, text, error: String(err?.message ?? err), name: err?.constructor?.name ?? null };
  }
}

(async () => {
  const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 20000 });
  for (const mode of modes) console.log(JSON.stringify(await one(client, mode)));
})();
