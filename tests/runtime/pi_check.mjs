// Opens a session file with Pi's own SessionManager and prints what Pi makes of it:
//   node pi_check.mjs PI_FIXTURES_DIR FILE LEAF_ID
// -> {"rewritten": bool, "entries": n, "context": buildSessionContext(entries, leafId)}
import { copyFileSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [fixtures, file, leafId] = process.argv.slice(2);
process.env.PI_CODING_AGENT_DIR = mkdtempSync(join(tmpdir(), "pi-agent-dir-"));
const entry = join(fixtures, "node_modules/@mariozechner/pi-coding-agent/dist/index.js");
const { SessionManager, buildSessionContext } = await import(pathToFileURL(entry).href);

const work = mkdtempSync(join(tmpdir(), "pi-check-"));
const copy = join(work, "session.jsonl");
copyFileSync(file, copy);
const original = readFileSync(copy, "utf8");
const sm = SessionManager.open(copy, work);
const entries = sm.getEntries();
const context = buildSessionContext(entries, leafId);
process.stdout.write(
	JSON.stringify({
		rewritten: readFileSync(copy, "utf8") !== original,
		entries: entries.length,
		context,
	}),
);
