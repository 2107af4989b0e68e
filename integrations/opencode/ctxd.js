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

  // The server decides, by the same rule as `ctxd hook claude` (POST /api/sessions/resolve):
  // CTXD_SESSION; else the session scoped to this folder; else one made for the checkout.
  async function findSession() {
    const ask = { harness: "opencode", cwd: directory, root }
    if (process.env.CTXD_SESSION) ask.session = process.env.CTXD_SESSION
    const response = await call("POST", "/api/sessions/resolve", ask)
    if (response.status !== 200) throw new Error(`no session: ${(await response.text()).slice(0, 300)}`)
    const found = await response.json()
    return { id: found.id, maxChars: Math.max(200, givenMaxChars || found.hook_max_chars) }
  }

  async function resolved() {
    // Remembered once found; a failure is retried on the next event.
    session = session || findSession().catch((error) => {
      session = null
      throw error
    })
    return await session
  }

  async function base() {
    return `/api/sessions/${(await resolved()).id}`
  }

  async function dump() {
    const route = `${await base()}/resume?fresh=true&max_chars=${(await resolved()).maxChars}`
    const response = await call("GET", route)
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
      if (event?.type === "session.idle") {
        await call("POST", `${await base()}/heartbeat`, undefined, 5000)
      } else if (event?.type === "session.compacted") {
        await call("POST", `${await base()}/snapshots`, { note: "opencode compacted the conversation" })
      }
    }),

    "experimental.session.compacting": safe(async (_input, output) => {
      const markdown = await dump()
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
        cwd: directory,
      }
      await call("POST", "/api/hooks/opencode", { payload, root, session: process.env.CTXD_SESSION || undefined }, 5000)
    }),

    "chat.message": safe(async (input, output) => {
      const parts = output?.parts || []
      const texts = parts.filter((p) => p.type === "text" && !p.synthetic)
      const text = texts.map((p) => p.text || "").join("\n")
      // The server tells a bare "continue" (answered with the dump, 200) from a message (202).
      const said = { text: text.slice(0, 100000), max_chars: (await resolved()).maxChars }
      const response = await call("POST", `${await base()}/prompts`, said)
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
