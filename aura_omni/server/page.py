"""The web page at `/`: plain HTML/JS from `server/web/` (no build step, no CDN), served without an API key
(the page asks for it and sends it on its own requests)."""

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

from .errors import APIError

router = APIRouter(include_in_schema=False)

WEB_DIR = Path(__file__).parent / "web"
MEDIA_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
WEB_FILES = {p.name: p for p in WEB_DIR.iterdir() if p.suffix in MEDIA_TYPES}  # names only: no path tricks
NO_CACHE = {"Cache-Control": "no-cache"}  # a restarted (upgraded) server's page is picked up on reload


@router.get("/")
async def index():
    return FileResponse(WEB_DIR / "index.html", media_type=MEDIA_TYPES[".html"], headers=NO_CACHE)


@router.get("/web/{name}")
async def asset(name: str):
    path = WEB_FILES.get(name)
    if path is None:
        raise APIError(f"no such page asset: {name}", 404, code="not_found")
    return FileResponse(path, media_type=MEDIA_TYPES[path.suffix], headers=NO_CACHE)
