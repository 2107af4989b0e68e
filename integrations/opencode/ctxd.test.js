// The opencode plugin against a real ctxd server, fed events in the shapes opencode sends.
// Run: node --test integrations/opencode/   (CTXD_PYTHON picks the Python that has ctxd).
import assert from "node:assert/strict"
import { spawn } from "node:child_process"
import { mkdirSync, mkdtempSync, rmSync } from "node:fs"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import path from "node:path"
import { after, before, test } from "node:test"
import { fileURLToPath } from "node:url"

import * as plugin_module from "./ctxd.js"
import { CtxdPlugin } from "./ctxd.js"

const HERE = path.dirname(fileURLToPath(import.meta.url))
const REPO = path.resolve(HERE, "..", "..")
const PYTHON = process.env.CTXD_PYTHON || path.join(REPO, ".venv", "bin", "python")

let server
let url
let work

function freePort() {
  return new Promise((resolve, reject) => {
    const probe = createServer()
    probe.on("error", reject)
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address()
      probe.close(() => resolve(port))
    })
  })
}

async function waitForHealth(deadlineMs) {
  while (Date.now() < deadlineMs) {
    if (server.exitCode !== null) throw new Error(`ctxd exited with ${server.exitCode}`)
    try {
      if ((await fetch(`${url}/health`)).ok) return
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  throw new Error("ctxd did not answer /health within 30 s")
}

async function api(method, route, body) {
  const response = await fetch(url + route, {
    method,
    headers: body === undefined ? {} : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const type = response.headers.get("content-type") || ""
  return { status: response.status, body: type.includes("json") ? await response.json() : await response.text() }
}

// A stand-in for the SDK client: the plugin only logs through client.app.log.
function fakeClient() {
  const logs = []
  return { logs, app: { log: async ({ body }) => logs.push(body) } }
}

async function plugin(directory, env = {}) {
  const saved = { ...process.env }
  Object.assign(process.env, { CTXD_URL: url, ...env })
  try {
    const client = fakeClient()
    const hooks = await CtxdPlugin({ client, directory, worktree: directory, project: {}, $: undefined })
    return { hooks, client }
  } finally {
    for (const key of Object.keys(process.env)) if (!(key in saved)) delete process.env[key]
    Object.assign(process.env, saved)
  }
}

function userMessage(sessionID, text) {
  const messageID = "msg_01JZCTXDTEST0000000000001"
  return [
    { sessionID, agent: "build", model: { providerID: "anthropic", modelID: "claude" }, messageID },
    {
      message: { id: messageID, sessionID, role: "user", time: { created: Date.now() } },
      parts: [{ id: "prt_01JZCTXDTEST0000000000001", sessionID, messageID, type: "text", text }],
    },
  ]
}

before(async () => {
  work = mkdtempSync(path.join(tmpdir(), "ctxd-opencode-"))
  const port = await freePort()
  url = `http://127.0.0.1:${port}`
  server = spawn(PYTHON, ["-m", "ctxd", "serve", "--port", String(port), "--data-dir", path.join(work, "data")], {
    cwd: REPO,
    stdio: ["ignore", "ignore", "inherit"],
  })
  await waitForHealth(Date.now() + 30000)
})

after(() => {
  server?.kill("SIGTERM")
  rmSync(work, { recursive: true, force: true })
})

test("messages, idle, compaction and continue reach ctxd", async () => {
  const project = path.join(work, "Serve Model")
  mkdirSync(project)
  const { hooks, client } = await plugin(project)
  const sessionID = "ses_01JZCTXDTEST00000000000001"

  await hooks["chat.message"](...userMessage(sessionID, "why does the server hang?"))
  const scoped = await api("GET", `/api/sessions?cwd=${encodeURIComponent(project)}`)
  assert.deepEqual(
    scoped.body.map((s) => [s.id, s.cwd, s.title]),
    [["serve-model", project, "Serve Model"]],
  )
  await api("PUT", "/api/sessions/serve-model", { objective: "serve the model without hanging" })

  await hooks.event({ event: { type: "session.idle", properties: { sessionID } } })

  const compacting = { context: [] }
  await hooks["experimental.session.compacting"]({ sessionID }, compacting)
  assert.equal(compacting.context.length, 1)
  assert.match(compacting.context[0], /serve the model without hanging/)
  assert.match(compacting.context[0], /why does the server hang\?/)
  assert.equal(compacting.prompt, undefined, "the default compaction prompt is kept")

  await hooks.event({ event: { type: "session.compacted", properties: { sessionID } } })
  const versions = (await api("GET", "/api/sessions/serve-model/snapshots")).body
  const newest = (await api("GET", `/api/sessions/serve-model/snapshots/${versions[0].version}`)).body
  assert.equal(newest.header.note, "opencode compacted the conversation")

  const [input, output] = userMessage(sessionID, "")
  await hooks["chat.message"](input, output)
  assert.equal(output.parts.length, 1)
  assert.match(output.parts[0].text, /^# serve-model/m)
  assert.match(output.parts[0].text, /serve the model without hanging/)
  const triggers = (await api("GET", "/api/sessions/serve-model/snapshots")).body.map((v) => v.trigger)
  assert.ok(triggers.includes("continue"), triggers.join(","))

  // Unrelated events are ignored, and nothing went wrong along the way.
  await hooks.event({ event: { type: "file.edited", properties: { file: "x.py" } } })
  assert.deepEqual(client.logs, [])
})

test("a message with no text parts gets the dump as a synthetic part", async () => {
  const project = path.join(work, "second")
  mkdirSync(project)
  const { hooks } = await plugin(project)
  const [input, output] = userMessage("ses_01JZCTXDTEST00000000000002", "")
  output.parts = []
  await hooks["chat.message"](input, output)
  assert.equal(output.parts.length, 1)
  const [part] = output.parts
  assert.equal(part.type, "text")
  assert.equal(part.synthetic, true)
  assert.equal(part.messageID, input.messageID)
  assert.ok(part.id.startsWith("prt_"))
  assert.match(part.text, /^# second/m)
})

test("with ctxd down every hook returns quietly and logs one warning each", async () => {
  const project = path.join(work, "offline")
  mkdirSync(project)
  const closed = `http://127.0.0.1:${await freePort()}`
  const { hooks, client } = await plugin(project, { CTXD_URL: closed })
  const sessionID = "ses_01JZCTXDTEST00000000000003"
  const [input, output] = userMessage(sessionID, "")
  const compacting = { context: [] }

  await hooks.event({ event: { type: "session.idle", properties: { sessionID } } })
  await hooks["experimental.session.compacting"]({ sessionID }, compacting)
  await hooks["chat.message"](input, output)

  assert.deepEqual(compacting.context, [])
  assert.equal(output.parts[0].text, "")
  assert.equal(client.logs.length, 3)
  for (const entry of client.logs) {
    assert.equal(entry.level, "warn")
    assert.match(entry.message, /opencode goes on without it/)
  }
})

test("tool calls reach ctxd as actions, and a launch is watched by itself", async () => {
  const project = path.join(work, "launcher")
  mkdirSync(project)
  const { hooks, client } = await plugin(project, { CTXD_SESSION: "launcher" })
  const command = "nohup python3 serve.py --port 30777 > serve.log 2>&1 &"
  // The shapes opencode 1.18 passes to tool.execute.after for its bash tool.
  const input = { tool: "bash", sessionID: "ses_01JZCTXDTEST00000000000002", callID: "call_1", args: { command } }
  const output = { title: command, output: "", metadata: { exit: 0, description: "start" } }
  await hooks["tool.execute.after"](input, output)
  const watches = (await api("GET", "/api/sessions/launcher/watches")).body
  const kinds = watches.map((w) => w.spec.kind).sort()
  // the process watch expects the launch's port: no port watch of its own beside it
  assert.deepEqual(kinds, ["log", "process"])
  assert.deepEqual(watches.find((w) => w.spec.kind === "process").spec.expect_ports, [30777])
  assert.ok(watches.every((w) => w.auto && /launched|output/.test(w.reason)))
  const dump = (await api("GET", "/api/sessions/launcher/resume")).body
  assert.match(dump, /serve\.py --port 30777/)
  assert.deepEqual(client.logs, [])
})

test("each opencode session is keyed by its sessionID; a sub-agent counts as its parent", async () => {
  const project = path.join(work, "keyed")
  mkdirSync(project)
  const { hooks, client } = await plugin(project)
  const [parent, child, later] = ["ses_01JZKEYED0000000000000001", "ses_01JZKEYED0000000000000002", "ses_01JZKEYED0000000000000003"]
  await hooks["chat.message"](...userMessage(parent, "profile the tokenizer"))
  // the task tool's child session reports under the parent's session
  await hooks.event({ event: { type: "session.created", properties: { info: { id: child, parentID: parent } } } })
  const command = "py-spy record -o profile.svg -- python tokenize.py"
  const input = { tool: "bash", sessionID: child, callID: "call_1", args: { command } }
  await hooks["tool.execute.after"](input, { title: command, output: "", metadata: { exit: 0 } })
  // a new session in the same opencode (its /new) continues the checkout's latest
  await hooks["chat.message"](...userMessage(later, "and the detokenizer"))
  const scoped = (await api("GET", `/api/sessions?cwd=${encodeURIComponent(project)}`)).body
  assert.deepEqual(scoped.map((s) => s.id), ["keyed"])
  assert.match((await api("GET", "/api/sessions/keyed/resume")).body, /py-spy record -o profile\.svg/)

  // a second opencode (another process) working in the same checkout gets a session of its own
  const other = spawn(process.execPath, ["--input-type=module", "-e", `
    import { CtxdPlugin } from ${JSON.stringify(path.join(HERE, "ctxd.js"))}
    const hooks = await CtxdPlugin({ client: {}, directory: ${JSON.stringify(project)}, worktree: ${JSON.stringify(project)} })
    const parts = [{ type: "text", text: "write the release notes" }]
    await hooks["chat.message"]({ sessionID: "ses_01JZKEYED0000000000000009" }, { message: {}, parts })
    console.log("sent")
    setTimeout(() => {}, 60000)
  `], { env: { ...process.env, CTXD_URL: url }, stdio: ["ignore", "pipe", "inherit"] })
  try {
    await new Promise((resolve) => other.stdout.on("data", resolve))
    await hooks["chat.message"](...userMessage("ses_01JZKEYED0000000000000004", "and the vocab"))
    const both = (await api("GET", `/api/sessions?cwd=${encodeURIComponent(project)}`)).body.map((s) => s.id)
    assert.equal(both.length, 2, both.join(","))
    assert.ok(both.includes("keyed") && both.some((id) => /^keyed-[0-9a-f]{6}$/.test(id)), both.join(","))
  } finally {
    other.kill("SIGKILL")
  }
  assert.deepEqual(client.logs, [])
})

// The requests the plugin sends, by method and path, while `fn` runs.
async function recording(fn) {
  const seen = []
  const real = globalThis.fetch
  globalThis.fetch = async (resource, init) => {
    seen.push(`${init?.method ?? "GET"} ${new URL(String(resource)).pathname}`)
    return real(resource, init)
  }
  try {
    await fn(seen)
  } finally {
    globalThis.fetch = real
  }
  return seen
}

const heartbeats = (seen) => seen.filter((r) => r.endsWith("/heartbeat")).length

test("one heartbeat each time a session goes idle, however many ways opencode says it", async () => {
  const project = path.join(work, "idler")
  mkdirSync(project)
  const { hooks, client } = await plugin(project)
  const sessionID = "ses_01JZIDLE00000000000000001"
  const idle = { type: "session.status", properties: { sessionID, status: { type: "idle" } } }
  const seen = await recording(async (seen) => {
    await hooks["chat.message"](...userMessage(sessionID, "tune the learning rate"))
    // 1.18 says it twice: the status, then the deprecated event
    await hooks.event({ event: idle })
    await hooks.event({ event: { type: "session.idle", properties: { sessionID } } })
    assert.equal(heartbeats(seen), 1, seen.join("\n"))
    // busy again, then idle: one more
    await hooks.event({ event: { type: "session.status", properties: { sessionID, status: { type: "busy" } } } })
    await hooks.event({ event: idle })
    assert.equal(heartbeats(seen), 2)
    // a new message makes it busy too
    await hooks["chat.message"](...userMessage(sessionID, "and the warmup"))
    await hooks.event({ event: { type: "session.idle", properties: { sessionID } } })
  })
  assert.equal(heartbeats(seen), 3)
  assert.deepEqual(client.logs, [])
})

test("on idle the agent's last reply reaches ctxd, from opencode's message and part events", async () => {
  const project = path.join(work, "replies")
  mkdirSync(project)
  const { hooks, client } = await plugin(project)
  const sessionID = "ses_01JZREPLY0000000000000001"
  const send = (type, properties) => hooks.event({ event: { type, properties } })
  const info = (id, role) => ({ id, sessionID, role, time: { created: Date.now() } })
  const text = (id, messageID, value, extra = {}) => ({ id, sessionID, messageID, type: "text", text: value, ...extra })
  await hooks["chat.message"](...userMessage(sessionID, "why does the loader stall?"))
  // the user's message and ctxd's own synthetic part are not the agent's words
  await send("message.updated", { sessionID, info: info("msg_u1", "user") })
  await send("message.part.updated", { sessionID, part: text("prt_u1", "msg_u1", "why does the loader stall?"), time: 1 })
  // the assistant's reply: a reasoning part, then a text part streamed in deltas, then whole
  await send("message.updated", { sessionID, info: info("msg_a1", "assistant") })
  await send("message.part.updated", { sessionID, part: { id: "prt_r1", sessionID, messageID: "msg_a1", type: "reasoning", text: "" } })
  await send("message.part.delta", { sessionID, messageID: "msg_a1", partID: "prt_r1", field: "text", delta: "thinking..." })
  await send("message.part.updated", { sessionID, part: text("prt_a1", "msg_a1", "") })
  await send("message.part.delta", { sessionID, messageID: "msg_a1", partID: "prt_a1", field: "text", delta: "The loader waits on " })
  await send("message.part.delta", { sessionID, messageID: "msg_a1", partID: "prt_a1", field: "text", delta: "disk reads; " })
  await send("message.part.updated", { sessionID, part: text("prt_s1", "msg_a1", "[ctxd dump]", { synthetic: true }) })
  await send("message.part.delta", { sessionID, messageID: "msg_a1", partID: "prt_a1", field: "text", delta: "HF_TOKEN=hf_Tq7vK2mXw9LkP4sR8yB1nC5dF3gH6jZ0aW was set." })
  const seen = await recording(async () => {
    await send("session.status", { sessionID, status: { type: "idle" } })
    await send("session.idle", { sessionID })
  })
  assert.deepEqual(seen.filter((r) => r.startsWith("POST")), ["POST /api/hooks/opencode"], seen.join("\n"))

  const taken = await api("POST", "/api/sessions/replies/snapshots", { force: true })
  const said = (await api("GET", `/api/sessions/replies/snapshots/${taken.body.header.version}`)).body.narrative
  assert.match(said.agent_said.text, /^The loader waits on disk reads; HF_TOKEN=.* was set\.$/)
  assert.doesNotMatch(said.agent_said.text, /hf_Tq7vK2m/)
  assert.deepEqual(said.user_messages.map((m) => m.text), ["why does the loader stall?"])

  // busy again, idle with nothing new said: a heartbeat, the words kept
  await send("session.status", { sessionID, status: { type: "busy" } })
  const again = await recording(async () => await send("session.idle", { sessionID }))
  assert.equal(heartbeats(again), 1, again.join("\n"))
  assert.deepEqual(client.logs, [])
})

test("the system prompt says ctxd records the session, once, and nothing while ctxd is down", async () => {
  const project = path.join(work, "pointer")
  mkdirSync(project)
  const { hooks, client } = await plugin(project)
  const sessionID = "ses_01JZPOINTER000000000000001"
  await hooks["chat.message"](...userMessage(sessionID, "profile the data loader"))
  const output = { system: ["You are opencode."] }
  const transform = hooks["experimental.chat.system.transform"]
  await transform({ sessionID, model: {} }, output)
  await transform({ sessionID, model: {} }, output)
  assert.equal(output.system.length, 2, output.system.join("\n"))
  assert.match(output.system[1], /^\[ctxd\] ctxd records the working state of this session/)
  assert.match(output.system[1], /`ctxd resume pointer` prints it/)
  // stated as facts, not orders
  assert.doesNotMatch(output.system[1], /\b(you must|always|never|record progress)\b/i)
  // a call with no session (a title, say) gets nothing
  const untitled = { system: [] }
  await transform({ model: {} }, untitled)
  assert.deepEqual(untitled.system, [])

  const closed = `http://127.0.0.1:${await freePort()}`
  const offline = await plugin(project, { CTXD_URL: closed })
  const quiet = { system: [] }
  await offline.hooks["experimental.chat.system.transform"]({ sessionID, model: {} }, quiet)
  assert.deepEqual(quiet.system, [])
  assert.deepEqual(offline.client.logs, [], "no warning before every model call")
  assert.deepEqual(client.logs, [])
})

test("the default export is opencode 2's plugin definition, with the 1.x plugin as server", () => {
  // opencode 2 reads `export default {id, setup}` (packages/plugin/src/promise/plugin.ts:
  // `interface Plugin { id: string; setup(context) => Promise<Cleanup | void> | Cleanup | void }`);
  // opencode 1.18.29 and later read the same object's `server`; older 1.x loaders call every
  // export, and the plugin starts once per input all the same
  const definition = plugin_module.default
  assert.deepEqual(Object.keys(plugin_module).sort(), ["CtxdPlugin", "default"])
  assert.equal(definition.id, "ctxd")
  assert.equal(typeof definition.setup, "function")
  assert.equal(definition.server, CtxdPlugin)
})

test("the 1.x plugin started twice from one input starts once", async () => {
  const input = { client: fakeClient(), directory: work, worktree: work }
  const first = await CtxdPlugin(input)
  const second = await plugin_module.default.server(input)
  assert.ok(Object.keys(first).length > 0)
  assert.deepEqual(second, {})
})

// A stand-in for opencode 2's plugin context: the hook registrations it offers (tool, session)
// and its event stream, in the shapes of its plugin types.
function fakeContext(directory) {
  const hooks = {}
  const queue = []
  let wake = () => {}
  const register = (domain) => ({
    hook: async (name, callback) => {
      hooks[`${domain}.${name}`] = callback
      return { dispose: async () => delete hooks[`${domain}.${name}`] }
    },
  })
  return {
    hooks,
    emit(event) {
      queue.push(event)
      wake()
    },
    ctx: {
      location: { directory },
      options: {},
      tool: register("tool"),
      session: register("session"),
      event: {
        subscribe: ({ signal }) => ({
          async *[Symbol.asyncIterator]() {
            signal.addEventListener("abort", () => wake())
            while (!signal.aborted) {
              if (queue.length) yield queue.shift()
              else await new Promise((resolve) => (wake = resolve))
            }
          },
        }),
      },
    },
  }
}

async function until(check, what) {
  const deadline = Date.now() + 30000
  while (Date.now() < deadline) {
    const value = await check()
    if (value) return value
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  throw new Error(`not within 30 s: ${what}`)
}

test("opencode 2: setup registers the hooks, and they and its events reach ctxd", async () => {
  const project = path.join(work, "Loader V2")
  mkdirSync(project)
  const fake = fakeContext(project)
  const saved = { ...process.env }
  process.env.CTXD_URL = url
  let cleanup
  try {
    cleanup = await plugin_module.default.setup(fake.ctx)
  } finally {
    Object.assign(process.env, saved)
  }
  assert.equal(typeof cleanup, "function")
  assert.deepEqual(Object.keys(fake.hooks).sort(), [
    "session.compaction", "session.context", "session.prompt", "tool.execute.after",
  ])
  const sessionID = "ses_01JZV2000000000000000001"
  const base = { sessionID, agent: "build", model: { providerID: "scripted", modelID: "m" } }

  // a prompt: the session of this checkout, with the user's words
  const first = { sessionID, messageID: "msg_01", prompt: { text: "why does the loader stall?" }, delivery: "immediate" }
  await fake.hooks["session.prompt"](first)
  assert.equal(first.prompt.text, "why does the loader stall?")
  const scoped = (await api("GET", `/api/sessions?cwd=${encodeURIComponent(project)}`)).body
  assert.deepEqual(scoped.map((s) => s.id), ["loader-v2"])

  // the shell tool's call, as 2.x's execute.after gives it: a launch ctxd watches by itself
  const command = "nohup python3 serve.py --port 30778 > serve.log 2>&1 &"
  await fake.hooks["tool.execute.after"]({
    tool: "shell", sessionID, agent: "build", messageID: "msg_02", id: "call_1",
    input: { command, description: "start" }, status: "completed",
    result: { content: "", metadata: { exit: 0 } },
  })
  const watches = (await api("GET", "/api/sessions/loader-v2/watches")).body
  assert.deepEqual(watches.map((w) => w.spec.kind).sort(), ["log", "process"])

  // before each model call: one pointer line among the system parts
  const request = { ...base, kind: "primary", system: [{ type: "text", text: "You are opencode." }], messages: [], options: {}, tools: {} }
  await fake.hooks["session.context"](request)
  await fake.hooks["session.context"](request)
  assert.equal(request.system.length, 2)
  assert.match(request.system[1].text, /`ctxd resume loader-v2` prints it/)

  // compaction: the dump as a system part; the summary is still the model's to write
  const compaction = { ...base, kind: "compaction", system: [], messages: [], options: {}, tools: {} }
  await fake.hooks["session.compaction"](compaction)
  assert.equal(compaction.system.length, 1)
  assert.match(compaction.system[0].text, /why does the loader stall\?/)
  assert.match(compaction.system[0].text, /serve\.py --port 30778/)
  assert.equal(compaction.result, undefined)

  // events: idle said twice (the status, the compatibility event) is one heartbeat; then the
  // compaction's event, whose snapshot shows that everything before it was handled
  const seen = await recording(async () => {
    fake.emit({ id: "evt_1", type: "session.status", data: { sessionID, status: { type: "idle" } } })
    fake.emit({ id: "evt_2", type: "session.idle", data: { sessionID } })
    fake.emit({ id: "evt_3", type: "session.execution.succeeded", data: { sessionID } })
    fake.emit({ id: "evt_4", type: "session.compacted", data: { sessionID } })
    await until(async () => {
      const versions = (await api("GET", "/api/sessions/loader-v2/snapshots")).body
      if (!versions.length) return false
      const newest = (await api("GET", `/api/sessions/loader-v2/snapshots/${versions[0].version}`)).body
      return newest.header.note === "opencode compacted the conversation"
    }, "the compaction's snapshot")
  })
  assert.equal(heartbeats(seen), 1, seen.join("\n"))

  // a bare message: the dump is the prompt's text
  const blank = { sessionID, messageID: "msg_03", prompt: { text: "" }, delivery: "immediate" }
  await fake.hooks["session.prompt"](blank)
  assert.match(blank.prompt.text, /^# loader-v2/m)

  await cleanup()
  fake.emit({ id: "evt_5", type: "session.idle", data: { sessionID } }) // after cleanup: unheard
})
