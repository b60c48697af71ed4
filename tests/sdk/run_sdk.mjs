// Runs one scenario with the real Agents SDK (@openai/agents, a SandboxAgent
// on the UnixLocalSandboxClient) against OPENAI_BASE_URL: the SDK's half of
// sdk_diff.py. The scenario's agent is an sbx agent file; its keys are
// given to the SDK under the JS SDK's names.
import fs from 'node:fs';
import { run, setTracingDisabled, setOpenAIAPI } from '@openai/agents';
import { SandboxAgent, Manifest } from '@openai/agents/sandbox';
import { UnixLocalSandboxClient } from '@openai/agents/sandbox/local';

setTracingDisabled(true);
const scenario = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const a = scenario.agent;
if (a.api === 'chat_completions') setOpenAIAPI('chat_completions');

// The Python SDK's model_settings names as the JS SDK spells them.
function modelSettings(s) {
  if (!s) return undefined;
  const names = {
    temperature: 'temperature', top_p: 'topP', max_tokens: 'maxTokens',
    truncation: 'truncation', store: 'store', reasoning: 'reasoning',
    tool_choice: 'toolChoice', parallel_tool_calls: 'parallelToolCalls',
    frequency_penalty: 'frequencyPenalty', presence_penalty: 'presencePenalty',
  };
  const out = {};
  for (const [k, v] of Object.entries(s)) {
    if (k === 'verbosity') out.text = { verbosity: v };
    else if (k === 'metadata') out.providerData = { ...(out.providerData ?? {}), metadata: v };
    else if (names[k]) out[names[k]] = v;
    else throw new Error(`sdk_diff: no JS name for model_settings.${k}`);
  }
  return out;
}

// sbx manifest entries (file and dir) as the SDK's.
function entries(e) {
  const out = {};
  for (const [k, v] of Object.entries(e ?? {})) {
    out[k] = v.type === 'dir'
      ? { type: 'dir', ...(v.children ? { children: entries(v.children) } : {}) }
      : { type: 'file', content: v.content_base64 !== undefined
          ? new Uint8Array(Buffer.from(v.content_base64, 'base64')) : v.content };
  }
  return out;
}

// An sbx agent file as a SandboxAgent; its handoffs name other agents of
// the scenario ("others": {file name: agent}), made once each.
const made = new Map();
function makeAgent(def) {
  if (made.has(def.name)) return made.get(def.name);
  const agent = new SandboxAgent({
    name: def.name,
    ...(def.instructions ? { instructions: def.instructions } : {}),
    ...(def.model ? { model: def.model } : {}),
    ...(def.model_settings ? { modelSettings: modelSettings(def.model_settings) } : {}),
    defaultManifest: new Manifest({ entries: entries(def.default_manifest?.entries) }),
  });
  made.set(def.name, agent);
  agent.handoffs = (def.handoffs ?? []).map((f) => makeAgent(scenario.others[f]));
  // Agents as tools, in the SDK's asTool.
  agent.tools = (def.tools ?? []).map((t) => makeAgent(scenario.others[t.agent])
    .asTool({ ...(t.name ? { toolName: t.name } : {}),
              ...(t.description ? { toolDescription: t.description } : {}) }));
  return agent;
}
const agent = makeAgent(a);
const result = await run(agent, scenario.prompt, {
  sandbox: { client: new UnixLocalSandboxClient() },
  maxTurns: 30,
});
console.log(typeof result.finalOutput === 'string'
  ? result.finalOutput : JSON.stringify(result.finalOutput));
