// ctxd for opencode: heartbeats, snapshots at compaction, the resume dump in the compaction
// prompt, and an empty user message as the "continue" signal. Copy this file into
// .opencode/plugins/ (one project) or ~/.config/opencode/plugins/ (all of them).
// Settings come from the environment: CTXD_URL, CTXD_TOKEN, CTXD_SESSION, CTXD_HOOK_MAX_CHARS.
import { createHash } from "node:crypto"
import path from "node:path"

// opencode calls every export of a plugin file as a plugin: only CtxdPlugin is exported.

const DEFAULT_URL = "http://127.0.0.1:8765"

function slug(name) {
  const text = name.toLowerCase().replace(/[^a-z0-9._-]+/g, "-").replace(/^[-._]+|[-._]+$/g, "")
  return text.slice(0, 48).replace(/[-._]+$/, "")
}

function isContinue(text) {
  const bare = text.trim().toLowerCase().replace(/[.!…]+$/, "").trim()
  return ["", "continue", "go on", "carry on", "keep going"].includes(bare)
}

export const CtxdPlugin = async ({ client, directory, worktree }) => {
  const url = (process.env.CTXD_URL || DEFAULT_URL).replace(/\/+$/, "")
  const token = process.env.CTXD_TOKEN
  const maxChars = Math.max(200, Number(process.env.CTXD_HOOK_MAX_CHARS) || 8000)
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

  // Same rule as `ctxd hook claude`: CTXD_SESSION; else the session scoped to this folder;
  // else one made for the checkout, named after its folder (with a suffix when that name is
  // taken by a session scoped elsewhere).
  async function findSession() {
    if (process.env.CTXD_SESSION) {
      await call("PUT", `/api/sessions/${process.env.CTXD_SESSION}`, {})
      return process.env.CTXD_SESSION
    }
    const scoped = await (await call("GET", `/api/sessions?cwd=${encodeURIComponent(directory)}`)).json()
    if (scoped.length) return scoped[0].id
    const name = path.basename(root) || "root"
    let sid = slug(name) || "session"
    const existing = await call("GET", `/api/sessions/${sid}`)
    const known = existing.status === 200 ? await existing.json() : null
    if (known && known.cwd !== null && known.cwd !== root) {
      sid = `${sid}-${createHash("sha1").update(root).digest("hex").slice(0, 6)}`
    }
    await call("PUT", `/api/sessions/${sid}`, known ? { cwd: root } : { cwd: root, title: name })
    return sid
  }

  async function base() {
    // Remembered once found; a failure is retried on the next event.
    session = session || findSession().catch((error) => {
      session = null
      throw error
    })
    return `/api/sessions/${await session}`
  }

  async function dump(fresh) {
    const route = `${await base()}/resume?fresh=${fresh}&max_chars=${maxChars}`
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
      const markdown = await dump(true)
      if (markdown) {
        output.context.push(
          "The working state ctxd recorded for this session follows. Keep its objective, " +
            "attempts with outcomes, running processes and next steps in the summary.\n\n" +
            markdown,
        )
      }
    }),

    "chat.message": safe(async (input, output) => {
      const parts = output?.parts || []
      const texts = parts.filter((p) => p.type === "text" && !p.synthetic)
      const text = texts.map((p) => p.text || "").join("\n")
      if (!isContinue(text)) {
        await call("POST", `${await base()}/messages`, { text: text.slice(0, 100000) }, 5000)
        return
      }
      await call("POST", `${await base()}/messages`, { text: "" })
      const markdown = await dump(false)
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
