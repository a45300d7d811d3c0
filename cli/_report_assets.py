"""The inline stylesheet and script of `agentledger report`, and the page's security policy.

Owns only constant text. The script must fetch nothing: it reads the patches embedded in the
page (``<script type="application/json" id="al-deltas">``), folds them as RFC 7386 merge
patches (keeping a snapshot every `SNAPSHOT_EVERY` deltas, so a slider move folds at most that
many), and shows the state after the chosen position. What it shows is set with
``textContent``; the only HTML it parses is the page's own escaped markup of a chunk (below).
Opening the page must stay cheap for long runs: the script parses and folds the patches only
when the reader asks for a position (or the address names one, ``#state-N``), the page itself
shows the final state, the script adds each event's "state here" button as it builds the event
(no bytes in the page for a button that does nothing without it) and the buttons share one
click handler, the other controls are hidden without JavaScript by a ``<noscript>`` style (no
restyle on load), and events off screen are not laid out (``content-visibility: auto``).

The timeline after its first chunk comes as text inside ``<noscript class="al-later">``
elements (the page's own escaped markup, see `_report_html._timeline`), which cost the browser
one text node each. The script parses a chunk (through an inert ``<template>``) when it comes
within 1500 px of the viewport, when a link or the address names an element inside it, and
otherwise one chunk per idle moment after load, until the whole timeline is built; Ctrl/Cmd+F
and printing build the rest at once, so the browser's find and print see every event. Until a
chunk is built its box is held at about 10 em per event, so the scroll bar stays roughly true.
"""

from __future__ import annotations

__all__ = ["CSP", "NOSCRIPT_STYLE", "SCRIPT", "SNAPSHOT_EVERY", "STYLE"]

SNAPSHOT_EVERY = 64

CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
    "img-src 'none'; font-src 'none'; connect-src 'none'; base-uri 'none'; form-action 'none'"
)

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:1em 2em;
color:#1b1b1b;background:#fff}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.2em;margin:1.2em 0 .4em;
border-bottom:1px solid #ccc}
table.kv th{text-align:left;padding-right:1em;vertical-align:top;white-space:nowrap}
table.kv td{word-break:break-all}
pre{background:#f5f5f5;padding:.4em .6em;margin:.2em 0;white-space:pre-wrap;
word-break:break-word;max-height:40em;overflow:auto}
.verdict{padding:.6em 1em;border-radius:4px;font-weight:600}
.ok{background:#e3f6e3;border:1px solid #2e7d32}
.broken{background:#fde4e4;border:1px solid #c62828}
.neutral{background:#eef;border:1px solid #99c}
details.step{border-left:3px solid #90a4ae;margin:.3em 0 .3em .2em;padding-left:.8em}
details.step>summary{cursor:pointer;font-weight:600}
.st-failed>summary{color:#c62828}
.ev{border:1px solid #ddd;border-radius:4px;margin:.35em 0;padding:.3em .6em}
.ev .head{font-family:ui-monospace,monospace;font-size:.92em}
.ev .kind{font-weight:700}
.k-PolicyDecided{background:#fff8e1;border-color:#f9a825}
.k-GuardrailTripped{background:#ffebee;border-color:#c62828;border-width:2px}
.k-RunFailed{background:#ffebee;border-color:#c62828}
.k-SynthesisProduced{background:#e8f5e9;border-color:#2e7d32}
.msg{margin:.2em 0 .2em 1em}.role{font-weight:600}
.evid{background:#c8e6c9;padding:0 .2em;border-radius:2px}
.missing{background:#ffcdd2}
:target,.al-target{outline:3px solid #1565c0}
#world-state{max-height:30em}
#al-slider{width:70%;vertical-align:middle}
.stbtn{font-size:.8em;margin-left:.6em}
.cut{color:#666;font-style:italic}
.env{font-family:ui-monospace,monospace;font-size:.75em;color:#555;word-break:break-all}
.ev{content-visibility:auto;contain-intrinsic-size:auto 9em}
"""

NOSCRIPT_STYLE = ".al-js{display:none}"
"""Hides the viewer's controls where no script runs (inside ``<noscript>`` in the head, so a
page with JavaScript never restyles itself on load)."""

SCRIPT = r"""
(function(){
"use strict";
var data=null, deltas=[], every=1, last=0, snaps=[{}];
function load(){
  if(data===null){
    data=JSON.parse(document.getElementById("al-deltas").textContent);
    deltas=data.deltas; every=data.every; last=data.last;
  }
}
function isObj(v){return v!==null&&typeof v==="object"&&!Array.isArray(v);}
function copy(v){return JSON.parse(JSON.stringify(v));}
function merge(target,patch){
  if(!isObj(patch)){return copy(patch);}
  var out=isObj(target)?target:{};
  Object.keys(patch).forEach(function(k){
    if(patch[k]===null){delete out[k];}else{out[k]=merge(out[k],patch[k]);}
  });
  return out;
}
function sorted(v){
  if(Array.isArray(v)){return v.map(sorted);}
  if(isObj(v)){var o={};Object.keys(v).sort().forEach(function(k){o[k]=sorted(v[k]);});return o;}
  return v;
}
function stateAfter(pos){
  var n=0;while(n<deltas.length&&deltas[n][0]<=pos){n++;}
  var s=Math.floor(n/every);
  while(snaps.length<=s){
    var i=snaps.length, st=copy(snaps[i-1]);
    for(var j=(i-1)*every;j<i*every;j++){st=merge(st,deltas[j][1]);}
    snaps.push(st);
  }
  var state=copy(snaps[s]);
  for(var k=s*every;k<n;k++){state=merge(state,deltas[k][1]);}
  return {state:state,count:n};
}
var slider=document.getElementById("al-slider");
var label=document.getElementById("al-pos");
var out=document.getElementById("world-state");
var patchOut=document.getElementById("al-patch");
function show(pos){
  load();
  pos=Math.max(0,Math.min(last,pos|0));
  slider.value=pos;
  var r=stateAfter(pos);
  out.textContent=JSON.stringify(sorted(r.state),null,2);
  out.setAttribute("data-position",String(pos));
  label.textContent="after position "+pos+" ("+r.count+" of "+deltas.length+" deltas applied)";
  var here=null;
  for(var i=0;i<deltas.length;i++){if(deltas[i][0]===pos){here=deltas[i][1];}}
  patchOut.textContent=here===null?"(no DeltaApplied at this position)":
    JSON.stringify(sorted(here),null,2);
}
slider.addEventListener("input",function(){show(parseInt(slider.value,10));});
document.getElementById("al-prev").addEventListener("click",function(){
  show(parseInt(slider.value,10)-1);});
document.getElementById("al-next").addEventListener("click",function(){
  show(parseInt(slider.value,10)+1);});
document.addEventListener("click",function(e){
  var b=e.target;
  if(b instanceof Element&&b.classList.contains("stbtn")){
    show(parseInt(b.getAttribute("data-pos"),10));
    document.getElementById("al-world").scrollIntoView();
  }
});
function buttons(root){
  Array.prototype.forEach.call(root.querySelectorAll("div.ev>.head>small"),function(at){
    var b=document.createElement("button");
    b.className="stbtn";b.type="button";b.textContent="state here";
    b.setAttribute("data-pos",at.parentNode.parentNode.id.slice(3));
    at.after(" ",b);
  });
}
buttons(document);
var later=Array.prototype.slice.call(document.querySelectorAll("noscript.al-later"));
var stepsOpen=true, seen=null;
function unfold(ns){
  var i=later.indexOf(ns);
  if(i<0){return;}
  later.splice(i,1);
  var box=ns.parentNode, t=document.createElement("template");
  t.innerHTML=ns.textContent;
  buttons(t.content);
  if(!stepsOpen){
    Array.prototype.forEach.call(t.content.querySelectorAll("details.step"),function(d){
      d.open=false;});
  }
  box.replaceChild(t.content,ns);
  box.style.minHeight="";
  if(seen!==null){seen.unobserve(box);}
}
function unfoldAll(){while(later.length){unfold(later[0]);}}
function attr(s){
  return s.replace(/&/g,"&amp;").replace(/</g,"&lt;").replace(/>/g,"&gt;")
    .replace(/"/g,"&quot;").replace(/'/g,"&#x27;");
}
function reveal(id){
  var el=document.getElementById(id);
  if(el===null){
    var needle=' id="'+attr(id)+'"';
    for(var i=0;i<later.length;i++){
      if(later[i].textContent.indexOf(needle)>=0){unfold(later[i]);break;}
    }
    el=document.getElementById(id);
  }
  for(var d=el&&el.parentElement;d!==null&&d!==undefined;d=d.parentElement){
    if(d.tagName==="DETAILS"&&!d.open){d.open=true;}
  }
  return el;
}
function decode(s){try{return decodeURIComponent(s);}catch(e){return s;}}
function target(){
  var m=/^#state-(\d+)$/.exec(location.hash);
  if(m){show(parseInt(m[1],10));return;}
  if(location.hash.length<2){return;}
  var id=decode(location.hash.slice(1));
  var old=document.querySelector(".al-target");
  if(old!==null){old.classList.remove("al-target");}
  var missing=document.getElementById(id)===null, el=reveal(id);
  if(el!==null&&missing){el.classList.add("al-target");el.scrollIntoView();}
}
document.addEventListener("click",function(e){
  var a=e.target instanceof Element?e.target.closest('a[href^="#"]'):null;
  if(a!==null){reveal(decode(a.getAttribute("href").slice(1)));}
},true);
window.addEventListener("hashchange",target);
document.addEventListener("keydown",function(e){
  if((e.ctrlKey||e.metaKey)&&(e.key==="f"||e.key==="F"||e.key==="g"||e.key==="G")){unfoldAll();}
});
window.addEventListener("beforeprint",unfoldAll);
function setAll(open){
  stepsOpen=open;
  Array.prototype.forEach.call(document.querySelectorAll("details.step"),function(d){
    d.open=open;});
}
document.getElementById("al-expand").addEventListener("click",function(){setAll(true);});
document.getElementById("al-collapse").addEventListener("click",function(){setAll(false);});
later.forEach(function(ns){
  var box=ns.parentNode;
  box.style.minHeight=(10*parseInt(box.getAttribute("data-events"),10))+"em";
});
if("IntersectionObserver" in window){
  seen=new IntersectionObserver(function(entries){
    entries.forEach(function(en){
      if(en.isIntersecting){unfold(en.target.querySelector("noscript.al-later"));}
    });
  },{rootMargin:"1500px 0px"});
  later.forEach(function(ns){seen.observe(ns.parentNode);});
}
var idle=window.requestIdleCallback||function(f){
  return setTimeout(function(){f({timeRemaining:function(){return 0;}});},1);};
function rest(deadline){
  do{if(later.length){unfold(later[0]);}}while(later.length&&deadline.timeRemaining()>10);
  if(later.length){idle(rest,{timeout:500});}
}
idle(rest,{timeout:500});
target();
})();
"""
