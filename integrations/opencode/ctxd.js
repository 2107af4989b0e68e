// ctxd for opencode: heartbeats, snapshots at compaction, the resume dump in the compaction
// prompt, an empty user message as the "continue" signal, and a line in the system prompt that
// says ctxd records the session. `ctxd install opencode` puts it in .opencode/plugins/ (one
// project) or ~/.config/opencode/plugins/ (all of them), where opencode 1.x and 2.x both look.
// Settings come from the environment: CTXD_URL, CTXD_TOKEN, CTXD_SESSION, CTXD_HOOK_MAX_CHARS.
//
// On idle it sends the text of the session's last assistant message (gathered from opencode's
// message and part events), for a dump to quote what the agent last said.
//
// One file for both plugin APIs. opencode 1.x (1.18.29 and later) reads the default export's
// `server` (the V1 plugin function, also exported by name as CtxdPlugin for the 1.x loaders
// that call every export); opencode 2.x reads the default export's `id` and `setup` (its V2
// plugin definition, `Plugin.define({id, setup})` without the package: `define` returns what
// it is given). Both ends are thin: what ctxd does is `ctxd()` below, shared.

import { existsSync } from "node:fs"
import path from "node:path"

const DEFAULT_URL = "http://127.0.0.1:8765"
// false when installed with `ctxd install --no-wake`: no waiter, no wake (CTXD_WAKE=0 likewise)
const WAKES_INSTALLED = true
const LEAD = "[ctxd]" // the pointer line starts with it: put in a system prompt once
// The agent's last reply sent on idle, at most (the server keeps its last 2,000 characters).
const SAID_MAX_CHARS = 8000
const COMPACTION_INTRO =
  "The working state ctxd recorded for this session follows. Keep its objective, " +
  "attempts with outcomes, running processes and next steps in the summary.\n\n"

// A shell line that sends something off (a lone `&`, `nohup`, `setsid`): its outcome is news.
const SENDS_OFF = /(?<![&>])&(?![&>])|(?:^|[\s;|(])(?:nohup|setsid)\s/
const WAKE_POLL_S = 240 // one long poll; Bun's fetch ends at 300 s
const WAKE_MAX_MS = 2 * 3600 * 1000 // a waiter's ceiling

// What ctxd does for one opencode instance, whichever plugin API called it. `wakeUp(id, text)`
// hands an idle opencode session a user message (1.x's client), when the plugin API has one.
function ctxd({ directory, root, log, wakeUp }) {
  const url = (process.env.CTXD_URL || DEFAULT_URL).replace(/\/+$/, "")
  const token = process.env.CTXD_TOKEN
  // Unset: the budget the server answers with the session (one definition, server side).
  const givenMaxChars = Number(process.env.CTXD_HOOK_MAX_CHARS) || 0

  async function call(method, route, body, timeoutMs = 30000) {
    const response = await fetch(url + route, {
      method,
      headers: {
        ...(body === undefined ? {} : { "content-type": "application/json" }),
        ...(token ? { authorization: `Bearer ${token}` } : {}),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(timeoutMs),
    })
    if (response.status >= 400 && response.status !== 404) {
      throw new Error(`${method} ${route}: HTTP ${response.status}: ${(await response.text()).slice(0, 300)}`)
    }
    return response
  }

  // ctxd records each opencode session (sessionID) in a session of its own within this
  // checkout, by the same rule as `ctxd hook claude` (service/ctxd/harness/conversations.py); a
  // sub-agent's child session counts as its parent's. CTXD_SESSION overrides it all.
  const sessions = new Map() // opencode sessionID -> Promise<{ id, maxChars }>
  const known = new Map() // opencode sessionID -> ctxd session id, once found
  const parents = new Map() // child sessionID -> parent sessionID, from session.created
  const idle = new Set() // sessionIDs told idle since their last prompt or busy status
  const waiting = new Set() // conversations whose attempts' news a waiter long-polls for
  const news = new Map() // conversation -> news not yet handed over (it was busy)
  // `opencode run` answers one prompt and exits: a wake would wait for its next run, as if the
  // user had said it; only a serving opencode (serve, the TUI) is woken
  const oneShot = process.argv.slice(1, 4).includes("run")
  const wakes =
    WAKES_INSTALLED && process.env.CTXD_WAKE !== "0" && typeof wakeUp === "function" && !oneShot
  const told = new Set() // the news texts handed over as user messages: ctxd's, not the user's
  // sessionID -> Map(messageID -> { role, parts: Map(partID -> text) }): the newest messages'
  // text parts, as opencode's events stream them, for the agent's last reply on idle
  const messages = new Map()
  // opencode runs this plugin in its own process: the server checks that pid to tell a
  // second opencode working in this checkout from this one starting a new session.
  const local = ["127.0.0.1", "localhost", "[::1]"].includes(new URL(url).hostname)

  function conversationOf(sessionID) {
    let id = sessionID || ""
    for (let hops = 0; parents.has(id) && hops < 10; hops++) id = parents.get(id)
    return id
  }

  function hookBody(payload) {
    return {
      payload: { ...payload, sessionID: conversationOf(payload.sessionID), cwd: directory },
      root,
      session: process.env.CTXD_SESSION || undefined,
      harness_pid: local ? process.pid : undefined,
    }
  }

  async function findSession(conversation) {
    const body = hookBody({ event: "session.resolve", sessionID: conversation })
    const response = await call("POST", "/api/hooks/opencode", body)
    if (response.status !== 200) throw new Error(`no session: ${(await response.text()).slice(0, 300)}`)
    const found = await response.json()
    known.set(conversation, found.session)
    return { id: found.session, maxChars: Math.max(200, givenMaxChars || found.hook_max_chars) }
  }

  async function resolved(sessionID) {
    // Remembered once found; a failure is retried on the next event.
    const conversation = conversationOf(sessionID)
    if (!sessions.has(conversation)) {
      const found = findSession(conversation).catch((error) => {
        sessions.delete(conversation)
        throw error
      })
      sessions.set(conversation, found)
    }
    return await sessions.get(conversation)
  }

  async function base(sessionID) {
    return `/api/sessions/${(await resolved(sessionID)).id}`
  }

  // The message `messageID` of `sessionID` as gathered so far (a few per session are kept).
  function gathered(sessionID, messageID) {
    if (!sessionID || !messageID) return undefined
    let ofSession = messages.get(sessionID)
    if (!ofSession) {
      ofSession = new Map()
      messages.set(sessionID, ofSession)
      if (messages.size > 100) messages.delete(messages.keys().next().value)
    }
    let message = ofSession.get(messageID)
    if (!message) {
      message = { role: undefined, parts: new Map() }
      ofSession.set(messageID, message)
      if (ofSession.size > 20) ofSession.delete(ofSession.keys().next().value)
    }
    return message
  }

  // The text of the session's newest assistant message that has some, used up ("" if none).
  function lastReply(sessionID) {
    const ofSession = messages.get(sessionID)
    messages.delete(sessionID)
    for (const message of [...(ofSession?.values() ?? [])].reverse()) {
      if (message.role !== "assistant") continue
      const text = [...message.parts.values()].join("\n").trim()
      if (text) return text
    }
    return ""
  }

  // One waiter per conversation: it long-polls ctxd for its attempts' news (no CPU while it
  // waits) and hands each outcome over once, at once when the session is idle, else when it
  // next goes idle; it goes when nothing is pending or after WAKE_MAX_MS.
  async function wait(payload) {
    const conversation = conversationOf(payload.sessionID)
    if (waiting.has(conversation)) return
    waiting.add(conversation)
    try {
      const until = Date.now() + WAKE_MAX_MS
      let launched = true
      while (Date.now() < until) {
        const body = { ...hookBody(payload), launched, wait_s: WAKE_POLL_S }
        const response = await call("POST", "/api/hooks/opencode/wake", body, (WAKE_POLL_S + 30) * 1000)
        if (response.status !== 200) return
        const answer = await response.json()
        if (answer.text) {
          news.set(conversation, [news.get(conversation), answer.text].filter(Boolean).join("\n"))
          if (idle.has(conversation)) await tell(conversation)
        }
        if (!answer.pending) return
        launched = false
      }
    } finally {
      waiting.delete(conversation)
    }
  }

  async function tell(conversation) {
    const text = news.get(conversation)
    if (!text) return
    news.delete(conversation) // told once: the woken turn's own idle finds nothing to tell
    idle.delete(conversation)
    told.add(text.trim())
    await wakeUp(conversation, text)
  }

  async function warn(message) {
    try {
      await log(message)
    } catch {
      // Logging is best effort: nothing here may break the agent's turn.
    }
  }

  return {
    // Every hook swallows its own failure: a missing ctxd must never stop opencode.
    safe: (fn) => async (...args) => {
      try {
        await fn(...args)
      } catch (error) {
        await warn(`ctxd at ${url}: ${error?.message || error}; opencode goes on without it`)
      }
    },

    child(id, parentID) {
      if (id && parentID) parents.set(id, parentID)
    },

    // opencode says a session went idle more than once per turn (1.x sends `session.status`
    // idle and the older `session.idle` both; 2.x its execution events too): one heartbeat
    // each time it goes idle, and none again until it was busy. Where the agent said something
    // since, the heartbeat is the idle event with its last reply (a sub-agent's reply is not
    // the agent's: its session only beats).
    async idle(sessionID) {
      if (idle.has(sessionID ?? "")) return
      idle.add(sessionID ?? "")
      await tell(conversationOf(sessionID))
      const reply = lastReply(sessionID)
      const said = parents.has(sessionID) ? "" : reply
      if (!said) {
        await call("POST", `${await base(sessionID)}/heartbeat`, undefined, 5000)
        return
      }
      const payload = { event: "session.idle", sessionID, last_assistant_message: said.slice(-SAID_MAX_CHARS) }
      await call("POST", "/api/hooks/opencode", hookBody(payload), 5000)
    },

    busy(sessionID) {
      idle.delete(sessionID ?? "")
    },

    // A message's role, from `message.updated` (its `info`).
    message(info) {
      const message = gathered(info?.sessionID, info?.id)
      if (message && typeof info.role === "string") message.role = info.role
    },

    // A text part, whole, from `message.part.updated` (its `part`); a synthetic one (ctxd's
    // own dump among them) or another kind of part is not what the agent said.
    part(part) {
      if (part?.type !== "text" || part.synthetic || part.ignored) return
      gathered(part.sessionID, part.messageID)?.parts.set(part.id, String(part.text ?? ""))
    },

    // A piece of a text part's text, from `message.part.delta`, once the part is known as text.
    delta(data) {
      if (data?.field !== "text" || typeof data.delta !== "string") return
      const parts = gathered(data.sessionID, data.messageID)?.parts
      if (parts?.has(data.partID)) parts.set(data.partID, parts.get(data.partID) + data.delta)
    },

    async compacted(sessionID) {
      const note = { note: "opencode compacted the conversation" }
      await call("POST", `${await base(sessionID)}/snapshots`, note)
    },

    // The dump for a compaction prompt ("" when there is none).
    async dump(sessionID) {
      const found = await resolved(sessionID)
      const route = `/api/sessions/${found.id}/resume?fresh=true&max_chars=${found.maxChars}`
      const response = await call("GET", route)
      const markdown = response.status === 200 ? await response.text() : ""
      return markdown ? COMPACTION_INTRO + markdown : ""
    },

    // What the agent did, for ctxd to watch and recall by itself: forwarded in the shape of
    // 1.x's `tool.execute.after` (the server maps it to actions). Never awaited by a turn.
    async tool(sessionID, tool, callID, args, title, output, metadata) {
      const payload = {
        event: "tool.execute.after",
        sessionID,
        input: { tool, sessionID, callID, args },
        output: { title, output: String(output ?? "").slice(-8000), metadata },
        args,
      }
      await call("POST", "/api/hooks/opencode", hookBody(payload), 5000)
      if (wakes && tool === "bash" && SENDS_OFF.test(String(args?.command ?? ""))) {
        wait(payload).catch((error) => warn(`ctxd: waiting for news failed: ${error?.message}`))
      }
    },

    // A user message: the server tells a bare "continue" (answered with the dump, 200) from a
    // message (202). The dump, or "".
    async prompt(sessionID, text) {
      idle.delete(sessionID ?? "")
      if (told.delete(text.trim())) return "" // ctxd's own news coming back: no user's prompt
      const said = { text: text.slice(0, 100000), max_chars: (await resolved(sessionID)).maxChars }
      const response = await call("POST", `${await base(sessionID)}/prompts`, said)
      return response.status === 200 ? await response.text() : ""
    },

    // The line a system prompt gets: that ctxd records this session, and where to read it.
    // Only once ctxd has answered for the session: with ctxd down it says nothing.
    pointer(sessionID) {
      const id = known.get(conversationOf(sessionID))
      if (!id) return ""
      return (
        `${LEAD} ctxd records the working state of this session (objective, attempts, ` +
        `processes, logs) as ctxd session \`${id}\`: \`ctxd resume ${id}\` prints it, and ` +
        `\`ctxd note ${id} KIND TEXT\` adds to its journal.`
      )
    },

    // The session found, waiting at most `ms` (a hook that runs before every model call),
    // quietly: the hooks that send something say when ctxd is not there.
    async soon(sessionID, ms = 2000) {
      let timer
      const late = new Promise((resolve) => (timer = setTimeout(resolve, ms)))
      try {
        await Promise.race([resolved(sessionID), late])
      } catch {
        // not found now: no line this time
      } finally {
        clearTimeout(timer)
      }
    },
  }
}

// The checkout holding `directory` (a `.git` folder or file), or the directory itself.
function gitRoot(directory) {
  for (let folder = directory; folder; ) {
    if (existsSync(path.join(folder, ".git"))) return folder
    const up = path.dirname(folder)
    if (up === folder) break
    folder = up
  }
  return directory
}

function withPointer(system, line, asText) {
  const has = system.some((part) => String(asText ? part?.text : part).startsWith(LEAD))
  if (line && !has) system.push(asText ? { type: "text", text: line } : line)
}

// A 1.x loader older than 1.18.29 calls every export, the default export's `server` among
// them, with one input: started twice from one input, the plugin starts once.
const started = new WeakSet()

// opencode 1.x: a function of opencode's input that returns its hooks.
export const CtxdPlugin = async (input) => {
  const { client, directory, worktree } = input ?? {}
  if (input && typeof input === "object") {
    if (started.has(input)) return {}
    started.add(input)
  }
  // opencode reports "/" as the worktree of a folder that is not a git checkout.
  const root = worktree && worktree !== "/" ? worktree : directory
  const log = (message) => client?.app?.log?.({ body: { service: "ctxd", level: "warn", message } })
  const session = client?.session
  const wakeUp =
    typeof session?.promptAsync === "function" || typeof session?.prompt === "function"
      ? async (id, text) => {
          const ask = { path: { id }, body: { parts: [{ type: "text", text }] } }
          await (session.promptAsync ? session.promptAsync(ask) : session.prompt(ask))
        }
      : undefined
  const core = ctxd({ directory, root, log, wakeUp })

  return {
    event: core.safe(async ({ event }) => {
      const properties = event?.properties ?? {}
      if (event?.type === "session.created") {
        core.child(properties.info?.id, properties.info?.parentID)
      } else if (event?.type === "session.status") {
        if (properties.status?.type === "idle") await core.idle(properties.sessionID)
        else core.busy(properties.sessionID)
      } else if (event?.type === "session.idle") {
        await core.idle(properties.sessionID)
      } else if (event?.type === "session.compacted") {
        await core.compacted(properties.sessionID)
      } else if (event?.type === "message.updated") {
        core.message(properties.info)
      } else if (event?.type === "message.part.updated") {
        core.part(properties.part)
      } else if (event?.type === "message.part.delta") {
        core.delta(properties)
      }
    }),

    "experimental.session.compacting": core.safe(async (input, output) => {
      const text = await core.dump(input?.sessionID)
      if (text) output.context.push(text)
    }),

    // No session-start hook in 1.x: the system prompt of each model call says it.
    "experimental.chat.system.transform": core.safe(async (input, output) => {
      if (!input?.sessionID || !Array.isArray(output?.system)) return
      await core.soon(input.sessionID)
      withPointer(output.system, core.pointer(input.sessionID), false)
    }),

    "tool.execute.after": core.safe(async (input, output) => {
      await core.tool(
        input?.sessionID, input?.tool, input?.callID, input?.args,
        output?.title, output?.output, output?.metadata,
      )
    }),

    "chat.message": core.safe(async (input, output) => {
      const parts = output?.parts || []
      const texts = parts.filter((p) => p.type === "text" && !p.synthetic)
      const markdown = await core.prompt(input?.sessionID, texts.map((p) => p.text || "").join("\n"))
      if (!markdown) return
      const blank = texts.find((p) => !(p.text || "").trim())
      if (blank) {
        blank.text = markdown
        return
      }
      parts.push({
        id: `prt_ctxd${Date.now().toString(16)}${Math.random().toString(16).slice(2, 10)}`,
        sessionID: input.sessionID,
        messageID: output.message?.id ?? input.messageID,
        type: "text",
        text: markdown,
        synthetic: true,
      })
    }),
  }
}

// opencode 2.x's names for a tool and the text of its result, in 1.x's: its shell tool is
// `shell` (1.x `bash`), and a result's text is `content` (a string or text parts).
const V2_TOOLS = { shell: "bash" }
// 2.x's events of a run that ended (`session.idle` and `session.status` still come too)
const ENDED = /^session\.execution\.(succeeded|failed|interrupted)$/

function resultText(result) {
  const content = result?.content ?? result?.output
  if (typeof content === "string") return content
  if (Array.isArray(content)) return content.map((part) => part?.text ?? "").join("")
  return ""
}

function exitOf(metadata) {
  for (const key of ["exit", "exitCode", "code"]) {
    if (Number.isInteger(metadata?.[key])) return metadata[key]
  }
  return undefined
}

// opencode 2.x: the plugin's setup registers its hooks through the context (the V2 plugin
// types, packages/plugin/src/promise/*.ts in the opencode repository): tool and session hooks
// get one mutable event each; opencode's events come from `ctx.event.subscribe` as envelopes
// ({type, data}); registrations are disposed of with the plugin, the subscription ends on
// the cleanup this returns.
async function setup(ctx) {
  const directory = ctx?.location?.directory || process.cwd()
  const log = (message) => console.warn(message)
  const core = ctxd({ directory, root: gitRoot(directory), log })
  // A domain this opencode lacks is said once and skipped: the others still work.
  const hook = async (domain, name, fn) => {
    if (typeof ctx?.[domain]?.hook === "function") return await ctx[domain].hook(name, core.safe(fn))
    log(`ctxd: this opencode has no ${domain}.hook("${name}"); ctxd goes on without it`)
  }

  await hook("tool", "execute.after", async (event) => {
    const input = event?.input && typeof event.input === "object" ? event.input : {}
    const args = { ...input, filePath: input.filePath ?? input.path ?? input.file_path }
    const tool = V2_TOOLS[event?.tool] ?? event?.tool
    let text = resultText(event?.result)
    let metadata = { ...event?.result?.metadata, exit: exitOf(event?.result?.metadata) }
    if (event?.status === "error") {
      text = String(event.error?.message ?? event.error ?? "")
      metadata = {}
    }
    await core.tool(event?.sessionID, tool, event?.id, args, input.command, text, metadata)
  })

  await hook("session", "prompt", async (event) => {
    const prompt = event?.prompt
    if (!prompt || typeof prompt.text !== "string") return
    const markdown = await core.prompt(event.sessionID, prompt.text)
    if (markdown) prompt.text = prompt.text.trim() ? `${prompt.text}\n\n${markdown}` : markdown
  })

  // Before each model call: the pointer line among the system parts.
  await hook("session", "context", async (event) => {
    if (!event?.sessionID || !Array.isArray(event.system)) return
    await core.soon(event.sessionID)
    withPointer(event.system, core.pointer(event.sessionID), true)
  })

  // The compaction request's context: the dump as a system part (never `result`, which
  // would stand for the summary and skip the model).
  await hook("session", "compaction", async (event) => {
    if (!Array.isArray(event?.system)) return
    const text = await core.dump(event.sessionID)
    if (text) event.system.push({ type: "text", text })
  })

  const stop = new AbortController()
  const react = core.safe(async (event) => {
    const data = event?.data ?? event?.properties ?? {}
    const sessionID = data.sessionID ?? event?.durable?.aggregateID
    const type = event?.type
    if (type === "session.created") {
      core.child(data.info?.id ?? sessionID, data.info?.parentID ?? data.parentID)
    } else if (type === "session.status") {
      if (data.status?.type === "idle") await core.idle(sessionID)
      else core.busy(sessionID)
    } else if (type === "session.idle" || ENDED.test(type)) {
      await core.idle(sessionID)
    } else if (type === "session.execution.started") {
      core.busy(sessionID)
    } else if (type === "session.compacted") {
      await core.compacted(sessionID)
    } else if (type === "message.updated") {
      core.message(data.info)
    } else if (type === "message.part.updated") {
      core.part(data.part)
    } else if (type === "message.part.delta") {
      core.delta(data)
    }
  })
  ;(async () => {
    try {
      for await (const event of ctx.event.subscribe({ signal: stop.signal })) await react(event)
    } catch (error) {
      // subscribe missing, or the stream broken: ctxd goes on with the hooks above
      if (!stop.signal.aborted) console.warn(`ctxd: opencode's events ended: ${error?.message || error}`)
    }
  })()
  return () => stop.abort()
}

// The V2 definition, with the V1 plugin as `server` for opencode 1.x's loader.
export default { id: "ctxd", server: CtxdPlugin, setup }
