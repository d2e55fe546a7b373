-- strand_append, version 4 (installed by migration 0017): the append transaction as one
-- server-side function; see sessions_app/store/__init__.py, which builds the batch. Never
-- edit this file: a migration pins it. To change the function, add version 5 and a migration.
--
-- Version 4 keeps every check and write of version 3 and does less to get there:
-- - the result is one row of OUT parameters, not a set (no query runs to return it);
-- - a batch of one event is read with plain expressions and written with single-row
--   INSERTs; a longer batch is read in one pass and written with one INSERT per table;
-- - the owner's storage row is updated in place (it is inserted once, at the owner's first
--   append), not upserted at every call.
--
-- What it enforces, in one transaction, before and while it writes:
-- - the session row is locked first, then the owner's storage row (every writer of both
--   locks them in that order);
-- - p_expected equals the session's last_seq, and the batch takes the seqs after it, gapless;
-- - an entry's parent is an entry written before it (the current leaf when the writer named
--   none), or, for an orphan, an id that names no entry of the session, now or later: an
--   entry id that a stored orphan names as its missing parent is refused, and so is an
--   orphan whose parent is itself, an entry of the batch or of the session. Every parent
--   then has a lower seq than its child, so no chain of parents can loop, and an entry's
--   depth is its parent's plus one (0 for a root or an orphan);
-- - an entry records the nearest compaction, thinking-level change and model-setting entry
--   on its path (itself included); a leaf move names an entry of the session (or null), and
--   its 'from', when given, is the current leaf;
-- - the batch's bytes (its events' and entries' JSON, as the store measured them) are added
--   to the session's `stored_bytes` and to its owner's row of sessions_app_storageusage, and
--   a total past `p_quota` (null: none) refuses the whole batch;
-- - last_seq, the leaf, the counters and the title are updated, and pg_notify tells
--   listeners '<session id>:<last seq>' at commit.
--
-- Errors carry their own SQLSTATEs: SA001 the expected seq is stale (the message is the
-- current seq), SA002 no such session, SA003 a parent that is not an entry of the session,
-- SA004 a leaf move to an unknown entry, SA005 a leaf move whose 'from' is not the leaf,
-- SA006 a parent that would close a cycle, SA007 over the owner's storage quota (the
-- message is '<bytes stored before the batch>:<the batch's bytes>:<the quota>').

CREATE OR REPLACE FUNCTION strand_append(
    p_session uuid,
    p_expected bigint,
    p_now timestamptz,
    -- One object per event, in order (one JSON value binds faster than many arrays):
    --   type, schema_version, data, turn, step, ignorable   the event's columns
    --   entry_id        the entry the event adds, or null
    --   parent_given    whether the writer named the entry's parent (else: the current leaf)
    --   parent_id       the parent it named (null: a root)
    --   orphan          an entry whose parent is missing (Pi imports): it starts a root
    --   path_kind       what the entry sets on its path: compaction, thinking, model or null
    --   leaf_move       whether the event is a leaf/moved
    --   move_to         its target (null: before the first entry)
    p_batch jsonb,
    p_messages int,
    p_tokens bigint,
    p_title text,
    p_bytes bigint,
    p_quota bigint,
    OUT new_last_seq bigint,
    OUT new_leaf text
) AS $$
DECLARE
    cur_last bigint;
    cur_owner bigint;
    used bigint;
    clash text;
    n int;
    i int;
    pos int;
    target text;
    one jsonb;
    -- The current leaf and its path facts: depth, and the nearest compaction, thinking-level
    -- change and model-setting entry on the path from the root to it (itself included).
    cur_leaf text;
    cur_depth int;
    cur_pc text;
    cur_pt text;
    cur_pm text;
    parent text;
    depth int;
    pc text;
    pt text;
    pm text;
    b_types text[];
    b_versions smallint[];
    datas jsonb[];
    b_turns int[];
    b_steps int[];
    b_ignorable bool[];
    b_ids text[];
    b_parent_given bool[];
    b_parents text[];
    b_orphans bool[];
    b_kinds text[];
    b_moves bool[];
    b_move_to text[];
    parents text[];
    depths int[];
    pcs text[];
    pts text[];
    pms text[];
BEGIN
    n := jsonb_array_length(p_batch);
    IF n = 1 THEN
        -- Plain expressions, evaluated without starting a query.
        one := p_batch->0;
        b_types := ARRAY[one->>'type'];
        b_versions := ARRAY[(one->>'schema_version')::smallint];
        datas := ARRAY[one->'data'];
        b_turns := ARRAY[(one->>'turn')::int];
        b_steps := ARRAY[(one->>'step')::int];
        b_ignorable := ARRAY[(one->>'ignorable')::bool];
        b_ids := ARRAY[one->>'entry_id'];
        b_parent_given := ARRAY[(one->>'parent_given')::bool];
        b_parents := ARRAY[one->>'parent_id'];
        b_orphans := ARRAY[(one->>'orphan')::bool];
        b_kinds := ARRAY[one->>'path_kind'];
        b_moves := ARRAY[(one->>'leaf_move')::bool];
        b_move_to := ARRAY[one->>'move_to'];
    ELSE
        SELECT array_agg(x.o->>'type' ORDER BY x.i),
               array_agg((x.o->>'schema_version')::smallint ORDER BY x.i),
               array_agg(x.o->'data' ORDER BY x.i),
               array_agg((x.o->>'turn')::int ORDER BY x.i),
               array_agg((x.o->>'step')::int ORDER BY x.i),
               array_agg((x.o->>'ignorable')::bool ORDER BY x.i),
               array_agg(x.o->>'entry_id' ORDER BY x.i),
               array_agg((x.o->>'parent_given')::bool ORDER BY x.i),
               array_agg(x.o->>'parent_id' ORDER BY x.i),
               array_agg((x.o->>'orphan')::bool ORDER BY x.i),
               array_agg(x.o->>'path_kind' ORDER BY x.i),
               array_agg((x.o->>'leaf_move')::bool ORDER BY x.i),
               array_agg(x.o->>'move_to' ORDER BY x.i)
        INTO b_types, b_versions, datas, b_turns, b_steps, b_ignorable, b_ids, b_parent_given,
             b_parents, b_orphans, b_kinds, b_moves, b_move_to
        FROM jsonb_array_elements(p_batch) WITH ORDINALITY AS x(o, i);
    END IF;
    parents := array_fill(NULL::text, ARRAY[n]);
    depths := array_fill(NULL::int, ARRAY[n]);
    pcs := parents;
    pts := parents;
    pms := parents;

    SELECT s.last_seq, s.owner_id, s.leaf_entry_id, e.depth, e.path_compaction,
           e.path_thinking, e.path_model
    INTO cur_last, cur_owner, cur_leaf, cur_depth, cur_pc, cur_pt, cur_pm
    FROM sessions_app_session s
    LEFT JOIN sessions_app_entry e ON e.session_id = s.id AND e.entry_id = s.leaf_entry_id
    WHERE s.id = p_session FOR UPDATE OF s;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no session %', p_session USING ERRCODE = 'SA002';
    END IF;
    IF cur_last <> p_expected THEN
        RAISE EXCEPTION '%', cur_last USING ERRCODE = 'SA001';
    END IF;

    -- The owner's row is locked after the session's, as every writer of both does. It exists
    -- from the owner's first append on; two first appends at once meet in the upsert.
    UPDATE sessions_app_storageusage SET stored_bytes = stored_bytes + p_bytes
    WHERE owner_id = cur_owner RETURNING stored_bytes INTO used;
    IF NOT FOUND THEN
        INSERT INTO sessions_app_storageusage AS u (owner_id, stored_bytes)
        VALUES (cur_owner, p_bytes)
        ON CONFLICT (owner_id) DO UPDATE SET stored_bytes = u.stored_bytes + EXCLUDED.stored_bytes
        RETURNING u.stored_bytes INTO used;
    END IF;
    IF p_quota IS NOT NULL AND used > p_quota THEN
        RAISE EXCEPTION '%:%:%', used - p_bytes, p_bytes, p_quota USING ERRCODE = 'SA007';
    END IF;

    -- A stored orphan (depth 0 with a parent id) waits for an entry its parent id names:
    -- that entry would hang below its own descendant.
    SELECT e.parent_id INTO clash FROM sessions_app_entry e
    WHERE e.session_id = p_session AND e.parent_id = ANY(b_ids) AND e.depth = 0 LIMIT 1;
    IF clash IS NOT NULL THEN
        RAISE EXCEPTION 'entry % would close a parent cycle: an entry of this session names it as its parent',
            quote_literal(clash) USING ERRCODE = 'SA006';
    END IF;

    FOR i IN 1 .. n LOOP
        IF b_ids[i] IS NOT NULL THEN
            parent := CASE WHEN b_parent_given[i] THEN b_parents[i] ELSE cur_leaf END;
            IF b_orphans[i] AND parent IS NOT NULL THEN
                -- An orphan's parent must be missing for good: not itself, not an entry of
                -- the batch (before or after it), not an entry of the session.
                IF parent = ANY(b_ids) OR EXISTS (
                    SELECT 1 FROM sessions_app_entry e
                    WHERE e.session_id = p_session AND e.entry_id = parent
                ) THEN
                    RAISE EXCEPTION 'orphan entry % names % as its parent, which is an entry: it would close a parent cycle',
                        quote_literal(b_ids[i]), quote_literal(parent) USING ERRCODE = 'SA006';
                END IF;
            END IF;
            IF parent IS NULL OR b_orphans[i] THEN
                depth := 0; pc := NULL; pt := NULL; pm := NULL;
            ELSIF parent = cur_leaf THEN
                depth := cur_depth + 1; pc := cur_pc; pt := cur_pt; pm := cur_pm;
            ELSE
                -- An earlier entry of this batch, else one already stored.
                pos := array_position(b_ids[1:i - 1], parent);
                IF pos IS NOT NULL THEN
                    depth := depths[pos] + 1; pc := pcs[pos]; pt := pts[pos]; pm := pms[pos];
                ELSE
                    SELECT e.depth + 1, e.path_compaction, e.path_thinking, e.path_model
                    INTO depth, pc, pt, pm FROM sessions_app_entry e
                    WHERE e.session_id = p_session AND e.entry_id = parent;
                    IF NOT FOUND THEN
                        RAISE EXCEPTION 'parent % of entry % is not an entry of this session',
                            quote_literal(parent), quote_literal(b_ids[i])
                            USING ERRCODE = 'SA003';
                    END IF;
                END IF;
            END IF;
            CASE b_kinds[i]
                WHEN 'compaction' THEN pc := b_ids[i];
                WHEN 'thinking' THEN pt := b_ids[i];
                WHEN 'model' THEN pm := b_ids[i];
                ELSE NULL;
            END CASE;
            IF NOT b_parent_given[i] THEN
                datas[i] := jsonb_set(datas[i], '{entry,parentId}',
                                      coalesce(to_jsonb(parent), 'null'::jsonb));
            END IF;
            parents[i] := parent; depths[i] := depth; pcs[i] := pc; pts[i] := pt; pms[i] := pm;
            cur_leaf := b_ids[i];
            cur_depth := depth; cur_pc := pc; cur_pt := pt; cur_pm := pm;
        ELSIF b_moves[i] THEN
            IF datas[i] ? 'from' AND datas[i]->'from' <> coalesce(to_jsonb(cur_leaf), 'null'::jsonb) THEN
                RAISE EXCEPTION 'leaf/moved: ''from'' is % but the current leaf is %',
                    datas[i]->'from', coalesce(quote_literal(cur_leaf), 'null') USING ERRCODE = 'SA005';
            END IF;
            datas[i] := jsonb_set(datas[i], '{from}', coalesce(to_jsonb(cur_leaf), 'null'::jsonb));
            target := b_move_to[i];
            IF target IS NULL THEN
                cur_leaf := NULL; cur_depth := NULL; cur_pc := NULL; cur_pt := NULL; cur_pm := NULL;
            ELSE
                pos := array_position(b_ids[1:i - 1], target);
                IF pos IS NOT NULL THEN
                    cur_depth := depths[pos]; cur_pc := pcs[pos]; cur_pt := pts[pos]; cur_pm := pms[pos];
                ELSE
                    SELECT e.depth, e.path_compaction, e.path_thinking, e.path_model
                    INTO cur_depth, cur_pc, cur_pt, cur_pm FROM sessions_app_entry e
                    WHERE e.session_id = p_session AND e.entry_id = target;
                    IF NOT FOUND THEN
                        RAISE EXCEPTION 'leaf/moved: % is not an entry of this session',
                            quote_literal(target) USING ERRCODE = 'SA004';
                    END IF;
                END IF;
                cur_leaf := target;
            END IF;
        END IF;
    END LOOP;

    IF n = 1 THEN
        INSERT INTO sessions_app_event
            (session_id, seq, type, schema_version, time, data, entry_id, turn, step, ignorable)
        VALUES (p_session, cur_last + 1, b_types[1], b_versions[1], p_now, datas[1], b_ids[1],
                b_turns[1], b_steps[1], b_ignorable[1]);
        IF b_ids[1] IS NOT NULL THEN
            one := datas[1]->'entry';
            INSERT INTO sessions_app_entry
                (session_id, entry_id, parent_id, type, data, timestamp, seq, depth,
                 path_compaction, path_thinking, path_model)
            VALUES (p_session, b_ids[1], parents[1], one->>'type', one,
                    coalesce(one->>'timestamp', ''), cur_last + 1, depths[1], pcs[1], pts[1],
                    pms[1]);
        END IF;
    ELSE
        INSERT INTO sessions_app_event
            (session_id, seq, type, schema_version, time, data, entry_id, turn, step, ignorable)
        SELECT p_session, cur_last + t.i, t.type, t.version, p_now, t.data, t.entry_id, t.turn,
               t.step, t.ign
        FROM unnest(b_types, b_versions, datas, b_ids, b_turns, b_steps, b_ignorable)
             WITH ORDINALITY AS t(type, version, data, entry_id, turn, step, ign, i);
        INSERT INTO sessions_app_entry
            (session_id, entry_id, parent_id, type, data, timestamp, seq, depth,
             path_compaction, path_thinking, path_model)
        SELECT p_session, t.entry_id, t.parent, t.data->'entry'->>'type', t.data->'entry',
               coalesce(t.data->'entry'->>'timestamp', ''), cur_last + t.i, t.depth, t.pc,
               t.pt, t.pm
        FROM unnest(b_ids, parents, datas, depths, pcs, pts, pms)
             WITH ORDINALITY AS t(entry_id, parent, data, depth, pc, pt, pm, i)
        WHERE t.entry_id IS NOT NULL;
    END IF;
    UPDATE sessions_app_session
    SET last_seq = cur_last + n, leaf_entry_id = cur_leaf, updated_at = p_now,
        message_count = message_count + p_messages, token_count = token_count + p_tokens,
        title = coalesce(p_title, title), stored_bytes = stored_bytes + p_bytes
    WHERE id = p_session;
    -- Delivered by Postgres at commit, dropped on rollback; never carries event data.
    PERFORM pg_notify('strand_events', p_session::text || ':' || (cur_last + n)::text);
    new_last_seq := cur_last + n;
    new_leaf := cur_leaf;
END;
$$ LANGUAGE plpgsql;
