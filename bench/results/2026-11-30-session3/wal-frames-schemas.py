# WAL frames per W1-like commit (4 checkpoints, 8 writes) for three SQLite schemas:
# v2 as shipped, WITHOUT ROWID clustered by commit order, and v2 with a WITHOUT ROWID
# writes table; then the page numbers one commit writes. python3 wal-frames-schemas.py
import sqlite3, os, uuid, time, sys
def ids():
    return [f"01a22bb2-{i:04x}-7{os.urandom(2).hex()[1:]}-{os.urandom(8).hex()}" for i in range(4)]
SCHEMAS = {
 'v2': ["""CREATE TABLE cps (thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '', checkpoint_id TEXT NOT NULL, parent_checkpoint_id TEXT, checkpoint BLOB NOT NULL, metadata TEXT NOT NULL, commit_order INTEGER, PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id))""",
        "CREATE UNIQUE INDEX cps_co ON cps (thread_id, checkpoint_ns, commit_order)",
        """CREATE TABLE w (thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '', checkpoint_id TEXT NOT NULL, task_id TEXT NOT NULL, idx INTEGER NOT NULL, channel TEXT NOT NULL, task_path TEXT NOT NULL DEFAULT '', value BLOB NOT NULL, PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx))"""],
 'norowid_co': ["""CREATE TABLE cps (thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '', checkpoint_id TEXT NOT NULL, parent_checkpoint_id TEXT, checkpoint BLOB NOT NULL, metadata TEXT NOT NULL, commit_order INTEGER NOT NULL, PRIMARY KEY (thread_id, checkpoint_ns, commit_order)) WITHOUT ROWID""",
        "CREATE UNIQUE INDEX cps_id ON cps (thread_id, checkpoint_ns, checkpoint_id)",
        """CREATE TABLE w (thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '', checkpoint_id TEXT NOT NULL, task_id TEXT NOT NULL, idx INTEGER NOT NULL, channel TEXT NOT NULL, task_path TEXT NOT NULL DEFAULT '', value BLOB NOT NULL, PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)) WITHOUT ROWID"""],
 'rowid_w_norowid': ["""CREATE TABLE cps (thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '', checkpoint_id TEXT NOT NULL, parent_checkpoint_id TEXT, checkpoint BLOB NOT NULL, metadata TEXT NOT NULL, commit_order INTEGER, PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id))""",
        "CREATE UNIQUE INDEX cps_co ON cps (thread_id, checkpoint_ns, commit_order)",
        """CREATE TABLE w (thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL DEFAULT '', checkpoint_id TEXT NOT NULL, task_id TEXT NOT NULL, idx INTEGER NOT NULL, channel TEXT NOT NULL, task_path TEXT NOT NULL DEFAULT '', value BLOB NOT NULL, PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)) WITHOUT ROWID"""],
}
def fresh(name, page=4096):
    """A new database at /tmp/model/x.db with schema `name`, WAL, no auto-checkpoint."""
    p='/tmp/model/x.db'
    os.makedirs('/tmp/model', exist_ok=True)
    for s in ['','-wal','-shm']:
        try: os.remove(p+s)
        except FileNotFoundError: pass
    c=sqlite3.connect(p, isolation_level=None)
    c.execute(f'PRAGMA page_size={page}')
    c.execute('PRAGMA journal_mode=WAL'); c.execute('PRAGMA synchronous=OFF'); c.execute('PRAGMA wal_autocheckpoint=0')
    for s in SCHEMAS[name]: c.execute(s)
    return c, p

def commit(c, i):
    """One W1-like invoke on thread w1-{i}: 4 checkpoints and 8 writes in one transaction."""
    t=f"w1-{i}"
    c.execute('BEGIN IMMEDIATE')
    cid=ids()
    for k in range(4):
        c.execute('INSERT INTO cps (thread_id,checkpoint_ns,checkpoint_id,parent_checkpoint_id,checkpoint,metadata,commit_order) VALUES (?,?,?,?,?,?,?)',(t,'',cid[k], cid[k-1] if k else None, b'x'*(224+45*k), '{"source":"loop","step":0,"parents":{}}', k+1))
    for k in range(3):
        task=str(uuid.uuid4())
        for j in range(3 if k<2 else 2):
            c.execute('INSERT INTO w VALUES (?,?,?,?,?,?,?,?)',(t,'',cid[k],task,j,'branch:to:node_a','__start__','["a"]'))
    c.execute('COMMIT')

def run(name, n=2000, page=4096):
    c, p = fresh(name, page)
    sizes=[]
    for i in range(n):
        before=os.path.getsize(p+'-wal') if os.path.exists(p+'-wal') else 0
        commit(c, i)
        sizes.append((os.path.getsize(p+'-wal')-before)/(page+24))
    print(name, page, 'frames/commit avg', round(sum(sizes[200:])/len(sizes[200:]),2))

def walpages(name, n=1500):
    import struct
    c, p = fresh(name)
    for i in range(n):
        if i==n-1: before=os.path.getsize(p+'-wal')
        commit(c, i)
    data=open(p+'-wal','rb').read()[before:]
    pages=[struct.unpack('>I',data[o:o+4])[0] for o in range(0,len(data),4096+24)]
    roots={r[1]:r[0] for r in c.execute("select name, rootpage from sqlite_master")}
    print(name, pages, roots)

for name in SCHEMAS: run(name)
for name in SCHEMAS: walpages(name)
