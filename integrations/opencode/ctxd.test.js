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
