# Models weaver's SQLite checkpoint schema (v2) and counts WAL frames per W1-like
# commit (4 checkpoints + 3 writes) at three page sizes: python3 wal-frames.py
import sqlite3, os, uuid, json, time, sys
def run(page_size, n=400):
    p='/tmp/walexp.db'
    for s in ['','-wal','-shm']:
        try: os.remove(p+s)
        except FileNotFoundError: pass
    c=sqlite3.connect(p, isolation_level=None)
    c.execute(f'PRAGMA page_size={page_size}')
    c.execute('PRAGMA journal_mode=WAL'); c.execute('PRAGMA synchronous=OFF'); c.execute('PRAGMA wal_autocheckpoint=0')
    c.execute("""CREATE TABLE cps (thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '', checkpoint_id TEXT NOT NULL, parent_checkpoint_id TEXT, checkpoint BLOB NOT NULL, metadata TEXT NOT NULL, commit_order INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id))""")
    c.execute("CREATE UNIQUE INDEX cps_co ON cps (thread_id, checkpoint_ns, commit_order)")
    c.execute("""CREATE TABLE w (thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '', checkpoint_id TEXT NOT NULL, task_id TEXT NOT NULL, idx INTEGER NOT NULL, channel TEXT NOT NULL, task_path TEXT NOT NULL DEFAULT '', value BLOB NOT NULL, PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx))""")
    payload=b'x'*650; meta='{"source":"loop","step":1,"parents":{}}'
    sizes=[]
    for i in range(n):
        t=f"w1-{i}-{uuid.uuid4().hex[:8]}"
        before=os.path.getsize(p+'-wal') if os.path.exists(p+'-wal') else 0
        c.execute('BEGIN IMMEDIATE')
        ids=[str(uuid.uuid1()) for _ in range(4)]
        for k,cid in enumerate(ids):
            c.execute('INSERT INTO cps VALUES (?,?,?,?,?,?,?)',(t,'',cid, ids[k-1] if k else None, payload, meta, k+1))
        for k in range(3):
            c.execute('INSERT INTO w VALUES (?,?,?,?,?,?,?,?)',(t,'',ids[k],uuid.uuid4().hex,0,'foo','node','"a"'))
        c.execute('COMMIT')
        after=os.path.getsize(p+'-wal')
        sizes.append((after-before)/(page_size+24))
    print(page_size, 'frames/commit avg', round(sum(sizes[50:])/len(sizes[50:]),2))
for ps in [4096, 8192, 16384]:
    run(ps)
