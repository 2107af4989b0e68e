// ctxd for opencode: heartbeats, snapshots at compaction, the resume dump in the compaction
// prompt, and an empty user message as the "continue" signal. `ctxd install opencode` puts
// it in .opencode/plugins/ (one project) or ~/.config/opencode/plugins/ (all of them).
// Settings come from the environment: CTXD_URL, CTXD_TOKEN, CTXD_SESSION, CTXD_HOOK_MAX_CHARS.
// opencode calls every export of a plugin file as a plugin: only CtxdPlugin is exported.

const DEFAULT_URL = "http://127.0.0.1:8765"

export const CtxdPlugin = async ({ client, directory, worktree }) => {
  const url = (process.env.CTXD_URL || DEFAULT_URL).replace(/\/+$/, "")
  const token = process.env.CTXD_TOKEN
  // Unset: the budget the server answers with the session (one definition, server side).
  const givenMaxChars = Number(process.env.CTXD_HOOK_MAX_CHARS) || 0
  // opencode reports "/" as the worktree of a folder that is not a git checkout.
  const root = worktree && worktree !== "/" ? worktree : directory
  let session = null

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
  const parents = new Map() // child sessionID -> parent sessionID, from session.created
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

  async function dump(sessionID) {
    const found = await resolved(sessionID)
    const response = await call("GET", `/api/sessions/${found.id}/resume?fresh=true&max_chars=${found.maxChars}`)
    return response.status === 200 ? await response.text() : ""
  }

  async function warn(message) {
    try {
      await client?.app?.log?.({ body: { service: "ctxd", level: "warn", message } })
    } catch {
      // Logging is best effort: nothing here may break the agent's turn.
    }
  }

  // Every hook swallows its own failure: a missing ctxd must never stop opencode.
  const safe = (fn) => async (...args) => {
    try {
      await fn(...args)
    } catch (error) {
      await warn(`ctxd at ${url}: ${error?.message || error}; opencode goes on without it`)
    }
  }

  return {
    event: safe(async ({ event }) => {
      const info = event?.properties?.info
      if (event?.type === "session.created" && info?.parentID) {
        parents.set(info.id, info.parentID)
      } else if (event?.type === "session.idle") {
        await call("POST", `${await base(event.properties?.sessionID)}/heartbeat`, undefined, 5000)
      } else if (event?.type === "session.compacted") {
        const note = { note: "opencode compacted the conversation" }
        await call("POST", `${await base(event.properties?.sessionID)}/snapshots`, note)
      }
    }),

    "experimental.session.compacting": safe(async (input, output) => {
      const markdown = await dump(input?.sessionID)
      if (markdown) {
        output.context.push(
          "The working state ctxd recorded for this session follows. Keep its objective, " +
            "attempts with outcomes, running processes and next steps in the summary.\n\n" +
            markdown,
        )
      }
    }),

    // What the agent did, for ctxd to watch and recall by itself (issue: zero configuration):
    // forwarded as opencode gave it; the server maps it to actions. Never awaited by a turn.
    "tool.execute.after": safe(async (input, output) => {
      const payload = {
        event: "tool.execute.after",
        sessionID: input?.sessionID,
        input: { tool: input?.tool, sessionID: input?.sessionID, callID: input?.callID, args: input?.args },
        output: { title: output?.title, output: String(output?.output ?? "").slice(-8000), metadata: output?.metadata },
        args: input?.args,
      }
      await call("POST", "/api/hooks/opencode", hookBody(payload), 5000)
    }),

    "chat.message": safe(async (input, output) => {
      const parts = output?.parts || []
      const texts = parts.filter((p) => p.type === "text" && !p.synthetic)
      const text = texts.map((p) => p.text || "").join("\n")
      // The server tells a bare "continue" (answered with the dump, 200) from a message (202).
      const said = { text: text.slice(0, 100000), max_chars: (await resolved(input?.sessionID)).maxChars }
      const response = await call("POST", `${await base(input?.sessionID)}/prompts`, said)
      if (response.status !== 200) return
      const markdown = await response.text()
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
