// The BSON types and helpers a server-side script sees, as mongod's JavaScript scope
// (and the mongo shell) define them. Values made here turn back into their BSON types
// when a script returns them: each prototype carries a hidden `_bsontype` tag.
(function (g) {
  "use strict";
  function hidden(o, k, v) {
    Object.defineProperty(o, k, { value: v, enumerable: false, writable: true, configurable: true });
  }
  function define(name, ctor, tag, methods) {
    hidden(ctor.prototype, "_bsontype", tag);
    for (var k in methods) hidden(ctor.prototype, k, methods[k]);
    hidden(g, name, ctor);
  }

  var oidCounter = Math.floor(Math.random() * 0xffffff);
  var oidProcess = "";
  for (var i = 0; i < 10; i++) oidProcess += Math.floor(Math.random() * 16).toString(16);
  function hex(n, width) {
    var s = n.toString(16);
    while (s.length < width) s = "0" + s;
    return s;
  }
  function ObjectId(id) {
    if (!(this instanceof ObjectId)) return new ObjectId(id);
    if (id === undefined) {
      oidCounter = (oidCounter + 1) % 0x1000000;
      id = hex(Math.floor(Date.now() / 1000), 8) + oidProcess + hex(oidCounter, 6);
    }
    if (typeof id !== "string" || !/^[0-9a-fA-F]{24}$/.test(id))
      throw new Error("invalid object id: length");
    this.str = id.toLowerCase();
  }
  define("ObjectId", ObjectId, "ObjectId", {
    toString: function () { return 'ObjectId("' + this.str + '")'; },
    tojson: function () { return this.toString(); },
    toJSON: function () { return { $oid: this.str }; },
    valueOf: function () { return this.str; },
    toHexString: function () { return this.str; },
    equals: function (o) { return o instanceof ObjectId && o.str === this.str; },
    getTimestamp: function () { return new Date(parseInt(this.str.substr(0, 8), 16) * 1000); },
  });

  function NumberLong(v) {
    if (!(this instanceof NumberLong)) return new NumberLong(v);
    var s = v === undefined ? "0" : typeof v === "number" ? String(Math.trunc(v)) : String(v);
    if (!/^-?[0-9]+$/.test(s)) throw new Error("could not convert \"" + s + "\" to NumberLong");
    hidden(this, "__value", s);
    this.floatApprox = Number(s);
  }
  define("NumberLong", NumberLong, "NumberLong", {
    valueOf: function () { return Number(this.__value); },
    toNumber: function () { return Number(this.__value); },
    toString: function () { return "NumberLong(" + this.__value + ")"; },
    tojson: function () { return this.toString(); },
    toJSON: function () { return { $numberLong: this.__value }; },
    equals: function (o) { return Number(this) === Number(o); },
    compare: function (o) { var a = Number(this), b = Number(o); return a < b ? -1 : a > b ? 1 : 0; },
  });

  function NumberInt(v) {
    if (!(this instanceof NumberInt)) return new NumberInt(v);
    hidden(this, "__value", v === undefined ? 0 : Number(v) | 0);
  }
  define("NumberInt", NumberInt, "NumberInt", {
    valueOf: function () { return this.__value; },
    toNumber: function () { return this.__value; },
    toString: function () { return "NumberInt(" + this.__value + ")"; },
    tojson: function () { return this.toString(); },
    toJSON: function () { return this.__value; },
  });

  function NumberDecimal(v) {
    if (!(this instanceof NumberDecimal)) return new NumberDecimal(v);
    hidden(this, "__value", v === undefined ? "0" : String(v));
  }
  define("NumberDecimal", NumberDecimal, "NumberDecimal", {
    valueOf: function () { return Number(this.__value); },
    toString: function () { return 'NumberDecimal("' + this.__value + '")'; },
    tojson: function () { return this.toString(); },
    toJSON: function () { return { $numberDecimal: this.__value }; },
  });

  function Timestamp(t, i) {
    if (!(this instanceof Timestamp)) return new Timestamp(t, i);
    this.t = t === undefined ? 0 : t >>> 0;
    this.i = i === undefined ? 0 : i >>> 0;
  }
  define("Timestamp", Timestamp, "Timestamp", {
    getTime: function () { return this.t; },
    getInc: function () { return this.i; },
    toString: function () { return "Timestamp(" + this.t + ", " + this.i + ")"; },
    tojson: function () { return this.toString(); },
  });

  function BinData(type, base64) {
    if (!(this instanceof BinData)) return new BinData(type, base64);
    hidden(this, "__type", type | 0);
    hidden(this, "__base64", String(base64));
  }
  define("BinData", BinData, "BinData", {
    subtype: function () { return this.__type; },
    base64: function () { return this.__base64; },
    length: function () {
      var s = this.__base64, pad = s.endsWith("==") ? 2 : s.endsWith("=") ? 1 : 0;
      return (s.length / 4) * 3 - pad;
    },
    toString: function () { return "BinData(" + this.__type + ',"' + this.__base64 + '")'; },
    tojson: function () { return this.toString(); },
  });

  function Code(code) {
    if (!(this instanceof Code)) return new Code(code);
    this.code = String(code);
  }
  define("Code", Code, "Code", {
    toString: function () { return "Code(" + JSON.stringify(this.code) + ")"; },
  });

  function MinKey() { return minKey; }
  function MaxKey() { return maxKey; }
  define("MinKey", MinKey, "MinKey", {
    toString: function () { return "MinKey"; },
    tojson: function () { return '{ "$minKey" : 1 }'; },
  });
  define("MaxKey", MaxKey, "MaxKey", {
    toString: function () { return "MaxKey"; },
    tojson: function () { return '{ "$maxKey" : 1 }'; },
  });
  var minKey = Object.create(MinKey.prototype);
  var maxKey = Object.create(MaxKey.prototype);

  function tojson(x) {
    if (x !== null && typeof x === "object" && typeof x.tojson === "function") return x.tojson();
    var s = JSON.stringify(x);
    return s === undefined ? String(x) : s;
  }
  hidden(g, "tojson", tojson);
  hidden(g, "tojsononeline", tojson);
  // Server-side printing goes nowhere (mongod writes it to its log).
  hidden(g, "print", function () {});
  hidden(g, "printjson", function () {});
  hidden(g, "printjsononeline", function () {});
  function assert(cond, msg) {
    if (!cond) throw new Error("assert failed" + (msg === undefined ? "" : " : " + msg));
  }
  hidden(g, "assert", assert);
  hidden(g, "isNumber", function (x) { return typeof x === "number"; });
  hidden(g, "isString", function (x) { return typeof x === "string"; });
  hidden(g, "isObject", function (x) { return typeof x === "object" || typeof x === "function"; });
})(globalThis);
