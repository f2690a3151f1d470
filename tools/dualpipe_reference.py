#!/usr/bin/env python3
"""tools/dualpipe_reference.py - DualPipe's per-rank compute order, derived independently of
pipepar's C generator from deepseek-ai/DualPipe's dualpipe.py (DualPipe.step(): its eight steps,
the two middle ranks' unoverlapped first F and B, the switch to zero bubble in step 6, W in FIFO
order). Writes tests/data/dualpipe_orders.txt, which tests/test_dualpipe.c compares against.

    python3 tools/dualpipe_reference.py > tests/data/dualpipe_orders.txt

Below 2*pp microbatches pipepar builds the order for 2*pp and drops the missing ones (small()).
Format of a line: "pp mb rank: action action ...", PyTorch's spelling (stage, F/B/I/W, microbatch;
an overlapped pair as "(sFm;sBm)OVERLAP_F_B")."""
import re

def order(pp, mb, r):
    H=pp//2; h=min(r,pp-1-r); half=mb//2; second = r>=H
    stage={0:(2*pp-1-r if second else r),1:(r if second else 2*pp-1-r)}
    base={0:(half if second else 0),1:(0 if second else half)}
    f=[0,0]; b=[0,0]; q=[]; out=[]
    def F(c):
        out.append(f"{stage[c]}F{base[c]+f[c]}"); f[c]+=1
    def B(c,zb=False):
        m=base[c]+b[c]; b[c]+=1
        out.append(f"{stage[c]}{'I' if zb else 'B'}{m}")
        if zb: q.append((stage[c],m))
    def W():
        s,m=q.pop(0); out.append(f"{s}W{m}")
    def FB(c0,c1):
        m0=base[c0]+f[c0]; f[c0]+=1; m1=base[c1]+b[c1]; b[c1]+=1
        out.append(f"({stage[c0]}F{m0};{stage[c1]}B{m1})OVERLAP_F_B")
    mid = (r==H-1 or r==H)
    for i in range(2*(H-h-1)): F(0)
    for i in range(h+1): F(0); F(1)
    for i in range(H-h-1): B(1,True); W(); F(1)
    for i in range(half-pp+h+1):
        if i==0 and mid: F(0); B(1)
        else: FB(0,1)
        FB(1,0)
    for i in range(H-h-1): B(1); FB(1,0)
    zb=False
    for i in range(h+1):
        if i==(h+1)//2 and h%2==1: zb=True
        B(1,zb)
        if i==(h+1)//2 and h%2==0: zb=True
        B(0,zb)
    for i in range(H-h-1): W(); B(0,True)
    for i in range(h+1): W()
    assert not q
    return " ".join(out)

def small(pp, mb, r):
    half=mb//2
    full=order(pp, 2*pp, r).split()
    def mp(m):  # full numbering: down 0..pp-1, up pp..2pp-1
        k = m if m < pp else m-pp
        if k >= half: return None
        return k if m < pp else half+k
    out=[]
    for a in full:
        mo=re.match(r"\((\d+)F(\d+);(\d+)B(\d+)\)OVERLAP_F_B",a)
        if mo:
            s0,m0,s1,m1=map(int,mo.groups()); x=mp(m0); y=mp(m1)
            if x is not None and y is not None: out.append(f"({s0}F{x};{s1}B{y})OVERLAP_F_B")
            elif x is not None: out.append(f"{s0}F{x}")
            elif y is not None: out.append(f"{s1}B{y}")
            continue
        mo=re.match(r"(\d+)([FBIW])(\d+)",a); s,op,m=mo.groups(); x=mp(int(m))
        if x is not None: out.append(f"{s}{op}{x}")
    return " ".join(out)

CONFIGS = [(2, 6), (4, 10), (4, 12), (6, 14), (8, 18), (8, 32), (6, 4), (8, 6), (4, 2)]
if __name__ == "__main__":
    print("# DualPipe compute orders from tools/dualpipe_reference.py (an independent derivation of")
    print("# deepseek-ai/DualPipe dualpipe.py DualPipe.step()); regenerate with that script.")
    for pp, mb in CONFIGS:
        for r in range(pp):
            text = order(pp, mb, r) if mb >= 2 * pp else small(pp, mb, r)
            print(f"{pp} {mb} {r}: {text}")
